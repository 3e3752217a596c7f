// The machine's figure beside a slow repetition: time the hypervisor gave
// this VM's vCPUs to others (the "steal" column of /proc/stat). A ring waits
// for its slowest member, so a stolen vCPU stalls every rank.
#pragma once

namespace troupe::cli {

/// Steal time summed over all CPUs since boot, in ms (at the kernel's 10 ms
/// tick), or -1 where /proc/stat cannot be read.
double stolen_ms();

}  // namespace troupe::cli
