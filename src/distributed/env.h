// Where this process sits in a distributed job, read from the variables the common launchers set, without
// flags: torchrun / braid launch (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
// Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE,
// the node list; rank 0's node is the first one listed) and Open MPI's mpirun (OMPI_COMM_WORLD_*). The first
// of those three families present wins (torchrun started inside a Slurm allocation is torchrun). A set of
// variables that contradicts itself is a UserError (exit status 2) naming the variables; nothing is guessed.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace braid::dist {

inline constexpr int kDefaultMasterPort = 29500;

struct DistEnv {
  std::string source = "single";  // "single", "torchrun", "braid launch", "slurm", "openmpi"
  int rank = 0, world_size = 1;
  int local_rank = 0, local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";  // where the rendezvous store listens
  int master_port = kDefaultMasterPort;
  bool store_hosted = false;  // the launcher serves the store (BRAID_STORE_HOSTED=1); rank 0 must not
  int heartbeat_ms = 1000;    // BRAID_HEARTBEAT_MS (the launcher's --heartbeat-interval); 0 = none
  bool distributed() const { return world_size > 1; }
  std::string str() const;  // "rank 1 of 4 (local 1 of 2, node 0) via torchrun, store at 10.0.0.1:29500"
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

DistEnv detect_env(const EnvLookup& env);
DistEnv detect_env();  // from the process environment

// Slurm's compressed host lists: "node[01-04,07],gpu1,rack[1-2]-n[3-4]" -> node01 ... node07, gpu1, rack1-n3 ...
// Zero padding follows the range's first number. Throws UserError on a malformed list.
std::vector<std::string> expand_nodelist(const std::string& list);

}  // namespace braid::dist
