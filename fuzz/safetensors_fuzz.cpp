// libFuzzer target: SafetensorsFile::parse on arbitrary bytes. It must never
// crash, throw or read outside the buffer; an accepted file's entries must lie
// inside its data section.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "ops/model/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<char> bytes(data, data + size);
  auto file = troupe::SafetensorsFile::parse(std::move(bytes), "fuzz.safetensors");
  if (!file) return 0;
  for (const auto& name : file->names()) {
    const auto* e = file->find(name);
    if (!e || e->end < e->begin || e->end > size) std::abort();
    volatile char sum = 0;  // touch every byte the entry claims
    const char* p = static_cast<const char*>(file->data(*e));
    for (std::size_t i = 0; i < e->end - e->begin; ++i) sum = static_cast<char>(sum + p[i]);
  }
  return 0;
}
