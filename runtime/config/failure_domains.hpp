// Failure domains and the buddy ring (recovery.buddy): each node's host-memory
// snapshots are copied to one other node, its holder, so that a lost node
// process is restored from there. A rack or a switch lost at once takes every
// node in it; so a node's copies go to a node in another failure domain when
// one exists.
//
//  FD-1  buddy_ring() is a permutation cycle over the nodes: every node holds
//        exactly one other node's copies (its ward) and gives its own to
//        exactly one (its holder), so the copies cost every node the same.
//  FD-2  With one domain (or none named), or when rank order already puts
//        every node's holder in another domain, the holder of node r is
//        r + 1 (mod n), as before domains existed. Otherwise the cycle
//        alternates domains, the largest first: every holder is in another
//        domain whenever no domain has more than half the nodes (when one
//        has, no cycle can; `same_domain_pairs` counts what is left).
//  FD-3  The domains are the job's for its whole life: [[topology]] in the
//        config first, then what each node published at its first rendezvous
//        (TROUPE_RACK, else Slurm's switch); a restarted process or a spare
//        keeps its rank's domain (rejoin), so every process builds the same ring.
#pragma once

#include <string>
#include <vector>

#include "common/expected.hpp"

namespace troupe {

/// This process's failure domain from its environment: TROUPE_RACK, else the
/// switch path of SLURM_TOPOLOGY_ADDR (its last component, the node, dropped);
/// "" if neither is set. An error names the variable when its value is not
/// printable ASCII or is longer than 200 bytes.
Expected<std::string> domain_from_environment();

/// Checks a domain name as published (printable ASCII without spaces, at most
/// 200 bytes); `where` names its source in the error.
Status check_domain_name(const std::string& domain, const std::string& where);

/// FD-1, FD-2: the holder of each node's copies, by node rank, for nodes in
/// `domains` (by rank; "" = unknown, a domain of its own kind: all unknown is
/// one domain). One node: holder -1.
std::vector<int> buddy_ring(const std::vector<std::string>& domains);

/// The node whose copies `node` holds (its ward) in `holders`, or -1.
int ward_of(const std::vector<int>& holders, int node);

/// How many nodes' copies sit in their own domain under `holders`.
int same_domain_pairs(const std::vector<int>& holders, const std::vector<std::string>& domains);

}  // namespace troupe
