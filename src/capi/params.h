// The parameter structs of the C API across header versions (include/pocket/pocket.h,
// "Compatibility"): each starts with struct_size, the size of the struct the app was compiled
// with. Fields are only appended, so an app's struct is a prefix of the library's: the library
// reads the fields that lie wholly within struct_size and takes its defaults for the others (an
// app compiled against an older header), and refuses a struct_size larger than its own (an app
// compiled against a newer header than the library it runs with). The app's struct is touched as
// bytes, never beyond its struct_size.
//
// A field appended later must start at or past the sizeof of every released version of its
// struct (add explicit padding if the compiler would place it in the old tail padding), or an
// older app's struct_size would cover the new field's bytes with padding garbage.
#pragma once

#include <array>
#include <cstddef>
#include <cstring>
#include <string_view>

#include "base/status.h"
#include "pocket/pocket.h"

namespace pocket::capi {

// Where a field lies in its struct.
struct FieldSpan {
  size_t offset;
  size_t size;
  size_t align;
};

#define POCKET_CAPI_FIELD(Struct, field)                                             \
  ::pocket::capi::FieldSpan {                                                        \
    offsetof(Struct, field), sizeof(Struct::field), alignof(decltype(Struct::field)) \
  }

// Whether `fields` are all the fields of a struct of `struct_size` bytes and alignment `align`
// after its leading size_t struct_size, in order: laid out as C lays out a struct, each at the
// next offset its alignment allows, the struct's tail padded to its alignment. A field missing
// from the list leaves a gap the check finds.
template <size_t N>
constexpr bool ListsEveryField(const std::array<FieldSpan, N>& fields, size_t struct_size,
                               size_t align) {
  size_t end = sizeof(size_t);
  for (const FieldSpan& f : fields) {
    if (f.offset != (end + f.align - 1) / f.align * f.align) return false;
    end = f.offset + f.size;
  }
  return (end + align - 1) / align * align == struct_size;
}

// pocket_X_params_init: `defaults` (the library's full struct) written field by field into the
// app's struct of struct_size bytes; bytes of fields the library does not know are zeroed.
template <typename P, size_t N>
void InitParams(P* params, size_t struct_size, const P& defaults,
                const std::array<FieldSpan, N>& fields) {
  if (params == nullptr || struct_size < sizeof(size_t)) return;
  auto* out = reinterpret_cast<unsigned char*>(params);
  const auto* in = reinterpret_cast<const unsigned char*>(&defaults);
  std::memset(out, 0, struct_size);
  for (const FieldSpan& f : fields) {
    if (f.offset + f.size <= struct_size) std::memcpy(out + f.offset, in + f.offset, f.size);
  }
  std::memcpy(out, &struct_size, sizeof(size_t));
}

// The app's struct (NULL: the defaults) as the library's: fields within its struct_size copied
// over `defaults`. `type` names the struct and `defaults_function` the function that fills one,
// for the messages.
template <typename P, size_t N>
Status ReadParams(const P* given, const P& defaults, const std::array<FieldSpan, N>& fields,
                  std::string_view type, std::string_view defaults_function, P* out) {
  *out = defaults;
  if (given == nullptr) return Status::Ok();
  const auto* in = reinterpret_cast<const unsigned char*>(given);
  size_t struct_size = 0;
  std::memcpy(&struct_size, in, sizeof(size_t));
  if (struct_size < sizeof(size_t)) {
    return InvalidArgumentError(type, ".struct_size is ", struct_size, ": start from ",
                                defaults_function, "(), which sets it, not from a zeroed struct");
  }
  if (struct_size > sizeof(P)) {
    return InvalidArgumentError(
        type, ".struct_size is ", struct_size, " bytes, more than the ", sizeof(P),
        " this library (pocket ", POCKET_VERSION_STRING,
        ") knows: the app was compiled against a newer header than the library it runs with");
  }
  auto* bytes = reinterpret_cast<unsigned char*>(out);
  for (const FieldSpan& f : fields) {
    if (f.offset + f.size <= struct_size) std::memcpy(bytes + f.offset, in + f.offset, f.size);
  }
  out->struct_size = sizeof(P);
  return Status::Ok();
}

}  // namespace pocket::capi
