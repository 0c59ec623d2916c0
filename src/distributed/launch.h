// `braid launch`: starts this node's processes of a job with torchrun's variables (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) plus BRAID_JOB_TOKEN_FILE (a fresh
// random token in a 0600 file, never on a command line) and BRAID_STORE_HOSTED=1: node 0's launcher serves
// the rendezvous store itself, so it outlives any rank. Each child's output lines are prefixed "[rank k] ".
// SIGINT / SIGTERM are forwarded to every child (a second one kills them). When a child exits abnormally, or
// its heartbeat is older than the timeout, the launcher names the rank, SIGTERMs the others, SIGKILLs what
// is left after the grace period, tells the other nodes' launchers through the store, and exits non-zero.
// Every child runs in its own process group, which is killed whole, and gets SIGKILL should the launcher
// itself be killed (PR_SET_PDEATHSIG), so nothing is left behind.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace braid::dist {

struct LaunchOptions {
  int nproc = 1;       // processes on this node
  int nnodes = 1;      // nodes in the job
  int node_rank = 0;   // this node's index
  std::string master;  // ADDR:PORT of the store (node 0 serves it); "" = 127.0.0.1 and a free port (one node)
  std::chrono::milliseconds grace{5000};               // after a failure, before SIGKILL
  std::chrono::milliseconds heartbeat_interval{1000};  // what the ranks are told to use
  std::chrono::milliseconds heartbeat_timeout{30'000}; // a beat older than this is a stuck rank; 0 = off
  std::vector<std::string> command;                    // the program and its arguments
};

// Runs the job to its end; returns the launcher's exit status: 0 when every rank exited 0; else the first
// failed rank's exit status (128 + signal when it was killed), 1 for a stuck rank or another node's failure,
// 128 + signal when the launcher itself was interrupted. Throws UserError for bad options.
int launch(const LaunchOptions& options, std::FILE* out = stdout, std::FILE* err = stderr);

}  // namespace braid::dist
