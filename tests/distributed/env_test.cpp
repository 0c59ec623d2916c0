// Environment detection: torchrun, braid launch, Slurm (with compressed node lists) and Open MPI variables,
// the precedence between them, and the errors (UserError, exit status 2) for contradictory variables.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "distributed/env.h"
#include "distributed/rendezvous.h"

using namespace braid;
using namespace braid::dist;

namespace {

DistEnv detect(const std::map<std::string, std::string>& vars) {
  return detect_env([&](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    detect(vars);
  } catch (const UserError& e) {
    return e.format();
  }
  return "";
}

TEST(Env, NothingSetIsOneProcess) {
  const DistEnv e = detect({});
  EXPECT_EQ(e.source, "single");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_FALSE(e.distributed());
}

TEST(Env, OneProcessJoinsWithoutStoreOrToken) {
  Job job = join_job(detect({}));
  ASSERT_NE(job.world, nullptr);
  EXPECT_EQ(job.world->size(), 1);
  EXPECT_EQ(job.store, nullptr);
  EXPECT_EQ(job.server, nullptr);
  Tensor x = Tensor::empty({Shape{3}, DType::f32});
  x.data<float>()[1] = 2.5f;
  job.world->all_reduce(x);
  EXPECT_EQ(x.data<float>()[1], 2.5f);
}

// Issue 24: under torchrun's (or Slurm's, Open MPI's) variables without braid launch, no token is an error
// that says how to give one, in that launcher's terms.
TEST(Env, NoJobTokenSaysHowToGiveOne) {
  ::unsetenv("BRAID_JOB_TOKEN");
  ::unsetenv("BRAID_JOB_TOKEN_FILE");
  auto error_of_join = [](const DistEnv& env) -> std::string {
    try {
      join_job(env);
    } catch (const UserError& e) {
      return e.format();
    }
    return "";
  };
  const std::string torchrun = error_of_join(
      detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}}));
  EXPECT_NE(torchrun.find("torchrun's variables (RANK, WORLD_SIZE) make this process rank 1 of 2, but no job token is set"),
            std::string::npos) << torchrun;
  EXPECT_NE(torchrun.find("export BRAID_JOB_TOKEN=$(openssl rand -hex 32) before torchrun"), std::string::npos) << torchrun;
  EXPECT_NE(torchrun.find("BRAID_JOB_TOKEN_FILE=PATH"), std::string::npos) << torchrun;
  const std::string slurm = error_of_join(detect({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"},
                                                  {"SLURM_JOB_NODELIST", "127.0.0.1"}}));
  EXPECT_NE(slurm.find("Slurm's variables (SLURM_PROCID, SLURM_NTASKS)"), std::string::npos) << slurm;
  EXPECT_NE(slurm.find("before srun"), std::string::npos) << slurm;
  const std::string mpi = error_of_join(detect({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_NE(mpi.find("Open MPI's variables"), std::string::npos) << mpi;
  EXPECT_NE(mpi.find("mpirun -x BRAID_JOB_TOKEN"), std::string::npos) << mpi;
}

TEST(Env, Torchrun) {
  const DistEnv e = detect({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                            {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29400"}});
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "10.1.2.3");
  EXPECT_EQ(e.master_port, 29400);
  EXPECT_FALSE(e.store_hosted);
  EXPECT_EQ(e.str(), "rank 5 of 8 (local 1 of 4, node 1) via torchrun, store at 10.1.2.3:29400");
  const DistEnv b = detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"},
                            {"MASTER_PORT", "1234"}, {"BRAID_LAUNCHED", "1"}, {"BRAID_STORE_HOSTED", "1"}});
  EXPECT_EQ(b.source, "braid launch");
  EXPECT_TRUE(b.store_hosted);
  EXPECT_EQ(b.local_world_size, 2);
}

TEST(Env, TorchrunErrors) {
  const std::map<std::string, std::string> ok = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                                                 {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  auto with = [&](const std::string& k, const std::string& v) {
    auto m = ok;
    if (v.empty()) m.erase(k);
    else m[k] = v;
    return error_of(m);
  };
  EXPECT_EQ(error_of(ok), "");
  EXPECT_NE(with("RANK", "2").find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos);
  EXPECT_NE(with("RANK", "one").find("RANK='one' is not an integer"), std::string::npos);
  EXPECT_NE(with("RANK", "1x").find("not an integer"), std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "0").find("WORLD_SIZE=0 is out of range"), std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "").find("WORLD_SIZE is not set"), std::string::npos);
  EXPECT_NE(with("LOCAL_RANK", "").find("LOCAL_RANK is not"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "70000").find("MASTER_PORT=70000 is out of range"), std::string::npos);
  EXPECT_NE(with("MASTER_ADDR", "").find("without MASTER_ADDR"), std::string::npos);
  auto m = ok;
  m["LOCAL_WORLD_SIZE"] = "4";
  EXPECT_NE(error_of(m).find("LOCAL_WORLD_SIZE=4 exceeds WORLD_SIZE=2"), std::string::npos);
}

TEST(Env, Slurm) {
  const DistEnv e = detect({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"},
                            {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_NODEID", "1"},
                            {"SLURM_JOB_NODELIST", "gpu[07-08]"}, {"SLURM_JOB_ID", "123456"}});
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "gpu07");
  EXPECT_EQ(e.master_port, kDefaultMasterPort + 123456 % 20000);
  // MASTER_ADDR / MASTER_PORT override the node list and the job-derived port.
  const DistEnv o = detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                            {"SLURM_JOB_NODELIST", "a,b"}, {"MASTER_ADDR", "10.0.0.9"}, {"MASTER_PORT", "4000"}});
  EXPECT_EQ(o.master_addr, "10.0.0.9");
  EXPECT_EQ(o.master_port, 4000);
  EXPECT_NE(error_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODELIST", "a"}})
                .find("SLURM_PROCID=3 is not below SLURM_NTASKS=2"),
            std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}}).find("node list"),
            std::string::npos);
  // torchrun inside a Slurm allocation: torchrun's variables win.
  const DistEnv t = detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "h"},
                            {"MASTER_PORT", "5"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}});
  EXPECT_EQ(t.source, "torchrun");
  EXPECT_EQ(t.rank, 1);
}

TEST(Env, SlurmNodeLists) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_nodelist("node[01-04,07]"), (V{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand_nodelist("a1,b[9-11],c"), (V{"a1", "b9", "b10", "b11", "c"}));
  EXPECT_EQ(expand_nodelist("r[1-2]-n[3-4]"), (V{"r1-n3", "r1-n4", "r2-n3", "r2-n4"}));
  EXPECT_EQ(expand_nodelist("gpu[098-101]"), (V{"gpu098", "gpu099", "gpu100", "gpu101"}));
  EXPECT_EQ(expand_nodelist("x[5]"), (V{"x5"}));
  EXPECT_THROW(expand_nodelist("node[01-04"), UserError);
  EXPECT_THROW(expand_nodelist("node01]"), UserError);
  EXPECT_THROW(expand_nodelist("node[4-1]"), UserError);
  EXPECT_THROW(expand_nodelist("node[a-b]"), UserError);
  EXPECT_THROW(expand_nodelist("a,,b"), UserError);
}

TEST(Env, OpenMpi) {
  const DistEnv e = detect({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.master_addr, "127.0.0.1");  // one node: the store is local
  // Several nodes: Open MPI does not say where rank 0 is, so MASTER_ADDR is required.
  const std::string err = error_of({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_NE(err.find("without MASTER_ADDR"), std::string::npos) << err;
  EXPECT_NE(err.find("mpirun -x MASTER_ADDR"), std::string::npos) << err;
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}})
                .find("OMPI_COMM_WORLD_LOCAL_RANK=2 is not below"),
            std::string::npos);
}

}  // namespace
