#pragma once
/// @file
/// The one generic `inspect` overload that makes every Protobuf message of
/// package `astraeus.v1` a CAF message type (found by ADL). Serialization
/// stores the message's wire bytes; deserialization parses them back and
/// fails with `caf::sec::runtime_error` on bytes that do not parse.
/// String conversion (CAF's logs, test output) uses `ShortDebugString()`.
/// Source: shared/notes/caf-0.17.md, "Types and errors".

#include <string>
#include <type_traits>

#include <caf/detail/stringification_inspector.hpp>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>
#include <google/protobuf/message.h>

namespace astraeus::v1 {

/// CAF inspector hook for any generated Protobuf message `T`.
template <class Inspector, class T>
std::enable_if_t<std::is_base_of_v<google::protobuf::Message, T>,
                 typename Inspector::result_type>
inspect(Inspector& f, T& x) {
  auto name = caf::meta::type_name(T::descriptor()->full_name().c_str());
  if constexpr (std::is_same_v<Inspector,
                               caf::detail::stringification_inspector>) {
    auto text = x.ShortDebugString();
    return f(name, text);
  } else if constexpr (Inspector::reads_state) {
    auto bytes = x.SerializeAsString();
    return f(name, bytes);
  } else {
    std::string bytes;
    auto parse = [&]() -> caf::error {
      if (!x.ParseFromString(bytes))
        return caf::make_error(caf::sec::runtime_error);
      return caf::none;
    };
    return f(name, bytes, caf::meta::load_callback(parse));
  }
}

} // namespace astraeus::v1
