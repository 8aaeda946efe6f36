#include "messages/json.hpp"

#include <cstdio>
#include <ctime>
#include <memory>
#include <regex>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "messages/error.hpp"
#include "messages/typed_twins.hpp"

namespace astraeus {

std::string message_to_json(const google::protobuf::Message& msg, bool whitespace) {
  std::unique_ptr<google::protobuf::Message> shown{msg.New()};
  shown->CopyFrom(msg);
  clear_typed_twins(*shown);
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = whitespace;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  std::string out;
  (void) google::protobuf::util::MessageToJsonString(*shown, &out, opts);
  return out;
}

namespace {

/// The parser's words in a user's: a number that does not fit its field
/// ("(burn_in_seconds): invalid value -5 for type TYPE_UINT64") as the
/// field, the value and the range; an unknown field (found from `root`, the
/// body's message) with the fields its object takes. Any other message
/// unchanged.
std::string explain_json_error(const std::string& message,
                               const google::protobuf::Descriptor* root) {
  // "labels: Cannot find field." at the body's top, "(task_groups[0]) gpu:
  // Cannot find field." within it: say which fields that object takes (a
  // new-user trial sent PATCH .../labels {"labels": {...}} and could not
  // tell that it takes set and remove).
  static const std::regex unknown{
    R"(^(?:\(([A-Za-z0-9_.\[\]]*)\) )?([A-Za-z0-9_]+): Cannot find field\.$)"};
  std::smatch u;
  if (root != nullptr && std::regex_match(message, u, unknown)) {
    const auto* d = root;
    const std::string path = u[1].str();
    const std::string name = (path.empty() ? "" : path + ".") + u[2].str();
    // Each step of the path names a message field ("task_groups[0]").
    for (size_t from = 0; d != nullptr && from < path.size();) {
      auto dot = path.find('.', from);
      if (dot == std::string::npos)
        dot = path.size();
      auto part = path.substr(from, dot - from);
      part = part.substr(0, part.find('['));
      const auto* f = d->FindFieldByName(part);
      if (f == nullptr)
        f = d->FindFieldByCamelcaseName(part);
      d = f != nullptr ? f->message_type() : nullptr;
      from = dot + 1;
    }
    if (d == nullptr || d->field_count() == 0)
      return message;
    std::string fields;
    for (int i = 0; i < d->field_count(); ++i) {
      const auto* f = d->field(i);
      // The `*_code` twins are the words' machine form, not for callers.
      if (f->name().size() > 5 && f->name().compare(f->name().size() - 5, 5, "_code") == 0
          && d->FindFieldByName(f->name().substr(0, f->name().size() - 5)) != nullptr)
        continue;
      fields += (fields.empty() ? "" : ", ") + f->name();
    }
    return name + ": unknown field (" + d->name() + " takes " + fields + ")";
  }
  static const std::regex number{
    R"(^\(?([A-Za-z0-9_.\[\]]*)\)?:? ?invalid value (\S+) for type TYPE_(U?)INT(32|64)$)"};
  std::smatch m;
  if (!std::regex_match(message, m, number))
    return message;
  auto field = m[1].str().empty() ? std::string{"a number"} : m[1].str();
  auto value = m[2].str();
  bool is_unsigned = !m[3].str().empty();
  bool wide = m[4].str() == "64";
  auto range = is_unsigned ? (wide ? "0 to 18446744073709551615" : "0 to 4294967295")
                           : (wide ? "-9223372036854775808 to 9223372036854775807"
                                   : "-2147483648 to 2147483647");
  if (is_unsigned && !value.empty() && value[0] == '-')
    return field + ": " + value + " is negative: give a whole number from " + range;
  return field + ": " + value + " is not a whole number from " + range;
}

/// `v` as a user sent it, shortened to 40 characters.
std::string shown_value(const nlohmann::json& v) {
  auto text = v.dump();
  return text.size() > 40 ? text.substr(0, 37) + "..." : text;
}

std::string wrong_json_type_in(const nlohmann::json& obj,
                               const google::protobuf::Descriptor* d,
                               const std::string& path);

/// What is wrong with `v` as a value of field `f` (one element of a
/// repeated field) at `name`: a bool that is not true or false, a string
/// that is not a string; empty when it is fine or the parser will say.
std::string wrong_json_type_of(const nlohmann::json& v, const google::protobuf::FieldDescriptor* f,
                               const std::string& name) {
  using FD = google::protobuf::FieldDescriptor;
  if (v.is_null())
    return {};  // the field's default, as the JSON mapping reads null
  switch (f->cpp_type()) {
    case FD::CPPTYPE_BOOL:
      return v.is_boolean() ? std::string{} : name + ": " + shown_value(v) + " is not true or false";
    case FD::CPPTYPE_STRING:
      return v.is_string() ? std::string{}
                           : name + ": " + shown_value(v) + " is not a string (give \"...\")";
    case FD::CPPTYPE_MESSAGE:
      // Well-known types (Struct, Timestamp, ...) have JSON forms of their own.
      if (v.is_object() && f->message_type()->file()->package() != "google.protobuf")
        return wrong_json_type_in(v, f->message_type(), name + ".");
      return {};
    default:
      return {};  // numbers as strings are the JSON mapping's (int64 as "60")
  }
}

/// The first value of object `obj` (message `d`, at `path`) of a JSON type
/// its field cannot take, in a user's words; empty when none. Protobuf's
/// parser reads "yes", "t" and "1" as true and names a number given for a
/// string only as "invalid value 5 for type TYPE_STRING".
std::string wrong_json_type_in(const nlohmann::json& obj,
                               const google::protobuf::Descriptor* d,
                               const std::string& path) {
  for (const auto& [key, value] : obj.items()) {
    const auto* f = d->FindFieldByName(key);
    if (f == nullptr)
      f = d->FindFieldByCamelcaseName(key);
    if (f == nullptr)
      continue;  // the parser names an unknown field
    const auto name = path + key;
    std::string why;
    if (f->is_map() && value.is_object()) {
      const auto* value_field = f->message_type()->map_value();
      for (const auto& [k, v] : value.items())
        if (why.empty())
          why = wrong_json_type_of(v, value_field, name + "." + k);
    } else if (f->is_repeated() && value.is_array()) {
      for (size_t i = 0; i < value.size() && why.empty(); ++i)
        why = wrong_json_type_of(value[i], f, name + "[" + std::to_string(i) + "]");
    } else if (!f->is_repeated()) {
      why = wrong_json_type_of(value, f, name);
    }
    if (!why.empty())
      return why;
  }
  return {};
}

} // namespace

caf::error message_from_json(std::string_view text, google::protobuf::Message& out,
                             const std::string& what) {
  out.Clear();
  // A value of the wrong JSON type, named before the parser reads it (or
  // reads "yes" as true).
  auto doc = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (!doc.is_discarded() && doc.is_object())
    if (auto why = wrong_json_type_in(doc, out.GetDescriptor(), ""); !why.empty())
      return caf::make_error(ec::invalid_request, what + ": " + why);
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(
    google::protobuf::StringPiece{text.data(), text.size()}, &out, opts);
  if (!status.ok()) {
    out.Clear();
    return caf::make_error(ec::invalid_request,
                           what + ": "
                             + explain_json_error(std::string{status.message()},
                                                  out.GetDescriptor()));
  }
  return caf::none;
}

caf::error merge_json_keys(std::string_view text, google::protobuf::Message& into,
                           const std::string& what) {
  std::unique_ptr<google::protobuf::Message> given{into.New()};
  if (auto err = message_from_json(text, *given, what))
    return err;
  // The keys the object has: what the typed parse cannot tell apart from
  // a default value ("require_acceptance": false).
  google::protobuf::Struct keys;
  auto status = google::protobuf::util::JsonStringToMessage(
    google::protobuf::StringPiece{text.data(), text.size()}, &keys);
  if (!status.ok())
    return caf::make_error(ec::invalid_request, what + ": " + std::string{status.message()});
  const auto* d = into.GetDescriptor();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  for (const auto& [key, value] : keys.fields()) {
    const auto* f = d->FindFieldByName(key);
    if (!f)
      f = d->FindFieldByCamelcaseName(key);
    if (f)
      fields.push_back(f);
  }
  into.GetReflection()->SwapFields(&into, given.get(), fields);
  return caf::none;
}

std::string rfc3339_utc(int64_t unix_ms) {
  auto t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

} // namespace astraeus
