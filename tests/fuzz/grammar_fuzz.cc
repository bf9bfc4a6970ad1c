// Fuzzes the grammar front ends and the recognizer: the input is a mode byte, a grammar text
// (GBNF, or a JSON Schema), a NUL, and a text to feed. Compiling must give a grammar or an error,
// never a crash or a hang; a grammar must take any bytes without crashing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "generate/gbnf.h"
#include "generate/grammar.h"
#include "generate/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool schema = (data[0] & 1) != 0;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view spec = rest.substr(0, nul);
  const std::string_view text =
      nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  pocket::StatusOr<std::unique_ptr<pocket::Grammar>> g =
      schema ? pocket::CompileJsonSchema(spec, pocket::JsonSchemaOptions{.span_source = "fuzz span",
                                                                         .has_span_source = true,
                                                                         .span_fields = {"span"}})
             : pocket::ParseGbnf(
                   spec, pocket::GbnfOptions{
                             .root = "root", .span_rule = "span", .span_source = "fuzz span"});
  if (!g.ok()) return 0;
  pocket::Recognizer r(g->get());
  // Feed in two pieces (a character may be split across calls), then ask the state.
  const size_t half = text.size() / 2;
  auto a = r.Feed(text.substr(0, half));
  if (a.ok() && *a) (void)r.Feed(text.substr(half));
  (void)r.Complete();
  (void)r.CanContinue();
  return 0;
}
