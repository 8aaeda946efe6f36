#include "messages/typed_twins.hpp"

#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "messages/astraeus.pb.h"

namespace astraeus {

void clear_typed_twins(google::protobuf::Message& msg) {
  using google::protobuf::FieldDescriptor;
  const auto* reflection = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(msg, &fields);
  for (const auto* field : fields) {
    if (field->options().GetExtension(v1::typed_twin)) {
      reflection->ClearField(&msg, field);
      continue;
    }
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || field->is_map())
      continue;
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(msg, field); ++i)
        clear_typed_twins(*reflection->MutableRepeatedMessage(&msg, field, i));
    } else {
      clear_typed_twins(*reflection->MutableMessage(&msg, field));
    }
  }
}

} // namespace astraeus
