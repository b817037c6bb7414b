// mpi_transport.cpp: MpiSession, and the MPI transport's groups (mpi_transport_impl.h): the whole
// group and its sub-groups (MPI_Comm_split), the ranks' nodes, shared memory between the
// processes of a node and the direct path over it. Built only when CMake finds MPI (else
// mpi_absent.cpp). Tested by tests/mpi_test.sh (mpirun -np 2 and 3) and mpi_hier_test.sh.
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/mpi/mpi_transport.h"
#include "collectives/mpi/mpi_transport_impl.h"
#include "collectives/shm.h"
#include "src/core/check.h"
#include "src/core/launcher.h"

namespace dpb {
namespace mpi_detail {

std::string mpi_error(int code) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(msg, size_t(len));
}

void node_rank_size(MPI_Comm comm, int rank, int& node_rank, int& node_size, int* leader) {
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
            "processes of this node");
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  if (leader) {
    *leader = rank;
    MPI_CHECK(MPI_Allreduce(&rank, leader, 1, MPI_INT, MPI_MIN, node), "the node's first rank");
  }
  MPI_Comm_free(&node);
}

MpiTransport::MpiTransport(Device& dev, int rank, int size, int nodes)
    : dev_(dev), rank_(rank), size_(size) {
  int world = 0, me = 0;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world), "world");
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me), "world");
  DPB_CHECK(world == size && me == rank, "MPI transport: rank " << rank << " of " << size
                                             << " but MPI_COMM_WORLD has rank " << me << " of "
                                             << world);
  DPB_CHECK(dev.rank() == rank, "MPI transport: the device is rank " << dev.rank()
                                                                     << "'s, not rank " << rank);
  DPB_CHECK(nodes >= 1 && size % nodes == 0,
            "--nodes (DPB_NODES) " << nodes << ": the " << size << " processes must split into "
                                   << "emulated nodes of equal size (a divisor of " << size << ")");
  for (int r = 0; r < size; ++r) whole_.push_back(r);
  {
    // The set-up's collective calls wait for every process too: watched on a board of this
    // rank alone (a peer stopped before its group exists still ends the job with exit 5).
    WatchBoard setup_board(size, rank, nullptr, {});
    WatchLabel label(setup_board.local_slot(rank), "the MPI group's set-up");
    WaitScope watched(setup_board.local_slot(rank), WaitKind::Library);
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "a communicator for the group");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    host_ = dev.kind() == BackendKind::Cpu;  // CPU: device memory is host memory, synchronous
    spin_ns_ = default_barrier_spin_ns(size);
    setup_shm(nodes);
  }
  make_board();
  join_staged();
}

MpiTransport::MpiTransport(MpiTransport& parent, int color, int key,
                           const std::vector<int>& members, std::vector<int> whole)
    : dev_(parent.dev_), rank_(key), size_(int(whole.size())), whole_(std::move(whole)),
      sh_(parent.sh_) {
  {
    // As the whole group's set-up, on a board in the whole group's numbers (its messages').
    const int whole_rank = whole_[size_t(rank_)];
    WatchBoard setup_board(int(sh_->node.size()), whole_rank, nullptr, {});
    WatchLabel label(setup_board.local_slot(whole_rank), "the MPI sub-group's set-up");
    WaitScope watched(setup_board.local_slot(whole_rank), WaitKind::Library);
    MPI_CHECK(MPI_Comm_split(parent.comm_, color, key, &comm_),
              parent.who() << ", sub-group " << color);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    int me = -1, n = 0;
    MPI_CHECK(MPI_Comm_rank(comm_, &me), "sub-group");
    MPI_CHECK(MPI_Comm_size(comm_, &n), "sub-group");
    DPB_CHECK(me == rank_ && n == size_, "MPI sub-group " << color << ": rank " << me << " of "
                                             << n << ", expected " << rank_ << " of " << size_
                                             << " (did every process split alike?)");
    host_ = parent.host_;
    spin_ns_ = parent.spin_ns_;
    setup_sub_shm();
  }
  make_board(parent.board_.get(), &members);
  join_staged();
}

std::vector<std::unique_ptr<Transport>> MpiTransport::split(
    const std::vector<std::vector<int>>& parts) {
  int color = -1, key = -1, total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    total += int(parts[i].size());
    for (size_t m = 0; m < parts[i].size(); ++m)
      if (parts[i][m] == rank_) {
        DPB_CHECK(color < 0, "sub-groups: " << who() << " is in two parts");
        color = int(i);
        key = int(m);
      }
  }
  DPB_CHECK(color >= 0 && total == size_, "sub-groups: the parts hold " << total << " of "
                                              << size_ << " ranks"
                                              << (color < 0 ? ", not " + who() : ""));
  std::vector<int> whole;
  for (int m : parts[size_t(color)]) whole.push_back(whole_[size_t(m)]);
  std::vector<std::unique_ptr<Transport>> out(parts.size());
  out[size_t(color)] =
      std::make_unique<MpiTransport>(*this, color, key, parts[size_t(color)], std::move(whole));
  return out;
}

Buffer MpiTransport::alloc(int rank, size_t n, MemCategory cat, const char* what) {
  check(rank);
  stage_for(n);
  if (!arena()) return Buffer(dev_, n, cat, what);
  dev_.memory().reserve(n * sizeof(float), cat, what);
  float* p = nullptr;
  try {
    p = arena()->alloc(n, what);
  } catch (...) {
    dev_.memory().unreserve(n * sizeof(float), cat);
    throw;
  }
  dev_.memory().track(p, n * sizeof(float), cat);
  return Buffer(arena_owner_, p, n);
}

void MpiTransport::stage_for(size_t n) {
  sh_->largest = std::max(sh_->largest, n);
  for (MpiTransport* t : sh_->staged) t->reserve_staging(n);
}

void MpiTransport::join_staged() {
  if (direct_ok_) return;
  sh_->staged.push_back(this);
  reserve_staging(sh_->largest);
}

void MpiTransport::begin(int rank, float* buf) {
  check(rank);
  buf_ = buf;
  direct_ = false;
  if (!direct_ok_) return;
  const int slot = int(begins_++ & 1);
  header(rank_)->published[slot].store(arena()->offset_of(buf));
  shm_barrier();
  for (int p = 0; p < size_; ++p) {
    const int64_t off = header(p)->published[slot].load();
    DPB_CHECK(off >= 0 || !sh_->required, "DPB_SHM=1 but " << words(p) << "'s buffer of this "
                                      "collective is not from CommGroup::alloc (shared memory)");
    if (off < 0) return;
    ptrs_[p] = reinterpret_cast<float*>(base(p) + off);
  }
  direct_ = true;
}

void MpiTransport::make_board(const WatchBoard* parent, const std::vector<int>* members) {
  std::vector<WatchSlot*> peers(size_t(size_), nullptr);
  if (arena()) {
    pids_.clear();
    for (int p = 0; p < size_; ++p) {
      pids_.push_back(sh_->pids[size_t(whole_[size_t(p)])]);
      if (base(p)) peers[size_t(p)] = &header(p)->watch;
    }
  }
  ptrs_.assign(size_t(size_), nullptr);
  if (parent && members) {
    board_ = std::make_unique<WatchBoard>(*parent, *members);
    return;
  }
  board_ = std::make_unique<WatchBoard>(size_, rank_, arena() ? &header(rank_)->watch : nullptr,
                                        peers);
}

void MpiTransport::setup_sub_shm() {
  ctl_off_.assign(size_t(size_), 0);
  if (!arena()) return;
  float* c = arena()->alloc((sizeof(Header) + sizeof(float) - 1) / sizeof(float),
                            "MPI sub-group control block");
  new (c) Header();
  const int64_t off = arena()->offset_of(c);
  MPI_CHECK(MPI_Allgather(&off, 1, MPI_INT64_T, ctl_off_.data(), 1, MPI_INT64_T, comm_),
            who() << ", exchanging the sub-group's control blocks");
  direct_ok_ = members_direct();
}

void MpiTransport::setup_shm(int nodes) {
  const char* env = std::getenv("DPB_SHM");
  if (env && !*env) env = nullptr;  // set but empty: the default
  DPB_CHECK(!env || !std::strcmp(env, "0") || !std::strcmp(env, "1"),
            "environment variable DPB_SHM='" << env << "' must be 0 (MPI messages between the "
                                               "processes of a node) or 1 (shared memory)");
  const bool off = env && !std::strcmp(env, "0"), required = env && !std::strcmp(env, "1");
  int node_rank = 0, local = 0, leader = rank_;
  node_rank_size(comm_, rank_, node_rank, local, &leader);
  DPB_CHECK(!required || size_ < 2 || (host_ && local == size_),
            "DPB_SHM=1 but the direct path needs every rank on this node's CPU backend ("
                << size_ << " ranks, " << local << " on this node, backend " << dev_.name()
                << ")");
  // One answer for every rank: a rank that cannot or may not take the direct path (DPB_SHM=0,
  // another backend) sends all to messages, so their collectives stay the same (ranks whose
  // DPB_SHM or backend differ are then named by check_ranks_agree, src/train/agree.h).
  int want = !(off || !host_ || size_ < 2), all_want = want;
  if (size_ >= 2)
    MPI_CHECK(MPI_Allreduce(&want, &all_want, 1, MPI_INT, MPI_MIN, comm_),
              who() << ", agreeing on the direct path");
  size_t mb = 65536;  // virtual: pages cost memory once written
  if (const char* e = std::getenv("DPB_SHM_ARENA_MB")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(e, &end, 10);
    DPB_CHECK(end != e && *end == '\0' && v >= 1 && v <= (1ull << 24),
              "environment variable DPB_SHM_ARENA_MB='" << e << "' is not a size in MiB in "
                                                           "[1, 16777216]");
    mb = size_t(v);
  }
  struct Info {
    int64_t pid, fd, bytes, leader, nodes;
  } mine{int64_t(getpid()), -1, 0, leader, nodes};
  auto sh = std::make_shared<ProcShared>();
  sh->required = required;
  std::string why;
  if (all_want) try {
    sh->arena = std::make_unique<ShmArena>(mb << 20);
    new (sh->arena->header()) Header();  // the whole group's control block
    mine.fd = sh->arena->fd();
    mine.bytes = int64_t(sh->arena->bytes());
  } catch (const Error& e) {
    why = e.what();
  }
  std::vector<Info> all(static_cast<size_t>(size_));
  MPI_CHECK(MPI_Allgather(&mine, sizeof(Info), MPI_BYTE, all.data(), sizeof(Info), MPI_BYTE,
                          comm_),
            who() << ", exchanging nodes and shared-memory handles");
  // The nodes: emulated, or the real ones when they hold equal ranks numbered node by node.
  std::vector<int> real(static_cast<size_t>(size_));
  for (int p = 0; p < size_; ++p) {
    DPB_CHECK(all[size_t(p)].nodes == nodes,
              "--nodes (DPB_NODES): rank " << p << " splits the processes into "
                                           << all[size_t(p)].nodes << " nodes, rank " << rank_
                                           << " into " << nodes << ": give every process the same");
    real[size_t(p)] = int(all[size_t(p)].leader);
  }
  int real_nodes = 1;
  nodes_refusal_ = node_layout(real, real_nodes);
  if (nodes > 1) {
    nodes_ = nodes;
    nodes_refusal_.clear();
    for (int p = 0; p < size_; ++p) sh->node.push_back(p / (size_ / nodes));
  } else {
    nodes_ = real_nodes;
    sh->node = real;
  }
  sh->bases.assign(size_t(size_), nullptr);
  for (int p = 0; p < size_; ++p) sh->pids.push_back(pid_t(all[size_t(p)].pid));
  ctl_off_.assign(size_t(size_), 0);  // every arena's start
  sh_ = sh;
  if (!all_want) return;
  for (int p = 0; p < size_ && why.empty(); ++p) {
    if (all[size_t(p)].fd < 0) why = "rank " + std::to_string(p) + " has no shared arena";
    else if (p == rank_) sh->bases[size_t(p)] = sh->arena->base();
    else if (all[size_t(p)].leader == leader) try {  // a peer of this node
      sh->maps.push_back(std::make_unique<ShmMapping>(pid_t(all[size_t(p)].pid),
                                                      int(all[size_t(p)].fd),
                                                      size_t(all[size_t(p)].bytes)));
      sh->bases[size_t(p)] = sh->maps.back()->base();
    } catch (const Error& e) {
      why = e.what();
    }
  }
  int ok = why.empty(), all_ok = 0;
  MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm_),
            who() << ", agreeing on shared memory");
  if (all_ok) {
    direct_ok_ = members_direct();
    return;
  }
  DPB_CHECK(!required, "DPB_SHM=1 but " << (why.empty() ? "another rank could not share "
                                                           "memory" : why));
  if (!why.empty())
    std::fprintf(stderr, "dpbench: rank %d: note: no shared memory between the ranks of this "
                 "node (%s): MPI messages instead\n", rank_, why.c_str());
  sh->maps.clear();
  sh->arena.reset();
  sh->bases.assign(size_t(size_), nullptr);
}

}  // namespace mpi_detail

using mpi_detail::MpiTransport;
using mpi_detail::node_rank_size;

bool mpi_built() { return true; }

MpiSession::MpiSession() {
  int inited = 0;
  MPI_Initialized(&inited);
  DPB_CHECK(!inited, "MpiSession: MPI is already initialized (one MpiSession per process)");
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "start-up");
  // Errors come back as codes (MPI_CHECK turns them into messages) instead of aborting silently.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "world");
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_), "world");
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
    library_.assign(lib, size_t(len));
    if (auto nl = library_.find('\n'); nl != std::string::npos) library_.resize(nl);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    const std::string why =
        "the MPI library (" + library_ + ") provides thread level " + std::to_string(provided) +
        " but dpbench needs MPI_THREAD_MULTIPLE (" + std::to_string(MPI_THREAD_MULTIPLE) +
        "): a rank's thread and its gradient communication thread both call MPI. Use an MPI "
        "built with thread support (Debian's OpenMPI is)";
    MPI_Finalize();
    throw Error(why);
  }
  node_rank_size(MPI_COMM_WORLD, rank_, local_rank_, local_size_);
}

MpiSession::~MpiSession() { MPI_Finalize(); }

void mpi_abort_job(int rank, const std::string& msg, int code) {
  std::fprintf(stderr, "dpbench: %s\n", rank_error_message(rank, msg).c_str());  // no "rank R: " twice
  std::fflush(stderr);
  std::fflush(stdout);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // not reached: MPI_Abort does not return
}

std::unique_ptr<Transport> make_mpi_transport(Device& dev, int rank, int size,
                                              const LinkSpec& link) {
  const LinkSpec l = with_env_nodes(link);  // --nodes, else DPB_NODES
  auto t = std::make_unique<MpiTransport>(dev, rank, size, l.nodes);
  if (!l.enabled()) return t;
  // Paced at the seam the threads transport is paced at (link.h), on this process's own fabric;
  // between emulated nodes with the inter-node spec (a sub-group books in the whole group's ranks).
  return with_link(std::move(t), std::make_shared<LinkFabric>(size, l));
}

bool mpi_direct_path(Transport& t) {
  auto* m = dynamic_cast<MpiTransport*>(&unpaced(t));
  return m && m->direct_ok();
}

}  // namespace dpb
