// A compute device as a training actor holds it: the device, one stream of
// its own and that stream's kernel table, opened from the job's choice of
// device. The one place that turns "cpu" or "cuda" into concrete types; the
// rest of the tree sees the ExecContext it hands out.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backends/comm/communicator.hpp"
#include "common/expected.hpp"
#include "ops/exec_context.hpp"

namespace troupe {

struct DeviceChoice {
  DeviceKind kind = DeviceKind::cpu;
  /// CPU: compute threads (>= 1).
  int threads = 1;
  /// CUDA: the node's local rank; the GPU used is local_rank % (GPUs present).
  int local_rank = 0;
  Precision precision = Precision::fp32;
  /// CUDA: each layer's forward and backward captured as a CUDA graph on its
  /// first run and replayed after (train.cuda_graphs).
  bool graphs = true;
};

/// "cpu" or "cuda".
constexpr const char* device_kind_name(DeviceKind k) { return k == DeviceKind::cuda ? "cuda" : "cpu"; }

class ComputeDevice {
 public:
  /// Opens the device `choice` names; a device this build or machine lacks, or
  /// a precision the device cannot run, is a one-line error naming it.
  static Expected<std::unique_ptr<ComputeDevice>> open(const DeviceChoice& choice);
  virtual ~ComputeDevice() = default;

  virtual const ExecContext& context() const = 0;
  /// What it is, for reports: "cpu (4 threads, OpenBLAS SkylakeX)", "NVIDIA H200 (sm_90)".
  virtual std::string describe() const = 0;
  Device& device() const { return context().device; }
  Stream& stream() const { return context().stream; }
  const Kernels& kernels() const { return context().kernels; }

  /// The measured matmul rate of this device in its precision, FLOP/s, for
  /// `sharers` actors on one node each holding a ComputeDevice like this one:
  /// the denominator of MFU (never a datasheet figure).
  virtual double measure_peak_flops(int sharers) = 0;

  /// The most device memory in use at once so far, in bytes, where the
  /// device keeps its own memory (a GPU's pool); -1 where it is host memory
  /// (the process's peak RSS says it).
  virtual std::int64_t peak_memory_bytes() const { return -1; }

  /// CPU time, µs, of the threads that run this device's kernels; empty where
  /// kernels do not run on host threads (then compute time is device time).
  virtual std::function<double()> compute_cpu_clock() { return {}; }
  /// Makes the device's compute take `cpu_us` µs longer (a fault drill's slow
  /// step, as a slower core would); empty where the device cannot.
  virtual std::function<void(double cpu_us)> compute_burner() { return {}; }

  /// What names this device's hardware across the job's processes and hosts
  /// (a GPU's UUID), so that a group can tell whether two members share one
  /// (NCCL refuses two ranks on one GPU); "" where memory is the host's.
  virtual std::string hardware_id() const { return ""; }
  /// NCCL for this device's tensors, where the device has it (the CUDA
  /// module, built with NCCL, on a machine where it loads): a unique id that
  /// member 0 of a group makes and hands the others (bytes), then each
  /// member's communicator from it (collective: every member calls it; its
  /// start bounded by `bound`). Elsewhere an error saying why there is none.
  virtual Expected<std::string> nccl_unique_id() { return make_error("NCCL needs train.device = \"cuda\""); }
  virtual Expected<std::unique_ptr<Communicator>> nccl_communicator(GroupMembers members, const std::string& unique_id,
                                                                    std::chrono::milliseconds bound) {
    (void)members, (void)unique_id, (void)bound;
    return make_error("NCCL needs train.device = \"cuda\"");
  }
};

}  // namespace troupe
