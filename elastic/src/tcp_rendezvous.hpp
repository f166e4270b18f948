// The multi-node rendezvous: a client of the job's RendezvousServer over TCP, which it also
// hosts in this process when hosts_rendezvous() says so.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "channel.hpp"
#include "ddprun/rendezvous.hpp"
#include "event_loop.hpp"
#include "master_port.hpp"
#include "munge_auth.hpp"
#include "rendezvous_auth.hpp"
#include "rendezvous_server.hpp"

namespace ddprun::elastic {

class TcpRendezvous final : public Rendezvous {
 public:
  // `config` must have passed validate().
  TcpRendezvous(asio::io_context& io, RendezvousConfig config);
  ~TcpRendezvous() override;

  // Hosts the server if this node should, then connects to the endpoint, retrying until
  // join_timeout (the hosting node may start later), and joins.
  void join(Handlers handlers) override;
  void worker_failed(int round, const WorkerFailure& failure) override;
  void workers_stopped(int round, const std::vector<WorkerFailure>& failures) override;
  void workers_succeeded(int round) override;
  void leave(int signal) override;

 private:
  // This node as the launcher sees it: joining (not yet connected, or no round yet), idle
  // between rounds, its workers running, being stopped, succeeded (waiting for the others), or
  // the job has ended for it.
  enum class State { kJoining, kIdle, kRunning, kStopping, kSucceeded, kDone };

  void host_if_chosen();
  void connect();
  void connect_to(const asio::ip::tcp::endpoint& endpoint);
  void retry_connect(const std::string& error);
  void arm_join_timer();
  void reconnect(const std::string& why);
  void on_connected(asio::ip::tcp::socket socket);
  void on_message(const nlohmann::json& message);
  void on_handshake_message(const nlohmann::json& message);
  void send_join();
  void end(JobOutcome outcome);
  void send(const nlohmann::json& message);
  template <class F>
  void post(F handler);

  asio::io_context& io_;
  RendezvousConfig config_;
  Endpoint endpoint_;
  std::string endpoint_text_;
  Handlers handlers_;
  State state_ = State::kJoining;
  int round_ = 0;
  int restarts_ = 0;
  std::optional<JobOutcome> finish_after_stop_;
  std::optional<MasterPort> master_port_;
  std::unique_ptr<RendezvousServer> server_;
  std::optional<asio::ip::address> bind_address_;  // --local_addr, as this node's source address
  asio::ip::tcp::resolver resolver_;
  asio::ip::tcp::socket connecting_;
  asio::steady_timer join_timer_;
  std::chrono::steady_clock::time_point join_deadline_;
  bool assigned_ = false;            // has had its first round
  bool reconnect_reported_ = false;
  asio::steady_timer retry_timer_;
  double connect_retry_;  // seconds until the next attempt to reach the endpoint
  std::string last_connect_error_;
  std::shared_ptr<Channel> channel_;
  NodeAuth auth_;                       // the secret or MUNGE; neither: open
  std::optional<Handshake> handshake_;  // authenticating: from connecting until the host proved itself
  std::string client_nonce_;            // this connection's, for the host's MUNGE credential
  bool left_ = false;
  Lifetime lifetime_;
};

}  // namespace ddprun::elastic
