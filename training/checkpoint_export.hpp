// A checkpoint's parameters as one Hugging Face GPT-2 safetensors file (what
// PyTorch and `troupe eval --init` read), streamed tensor by tensor: no
// process ever holds the whole model.
#pragma once

#include <cstdint>
#include <string>

#include "common/expected.hpp"

namespace troupe {

struct ExportFigures {
  int tensors = 0;
  std::uint64_t bytes = 0;  ///< of the output file
};

/// Writes checkpoint DIR's parameters to `output` atomically (a temporary
/// beside it, then a rename; the previous file is intact on any error). Every
/// piece read is checked against its CRC-32.
Expected<ExportFigures> export_weights(const std::string& dir, const std::string& output);

}  // namespace troupe
