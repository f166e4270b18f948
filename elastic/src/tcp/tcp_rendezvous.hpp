// The multi-node rendezvous: a client of the job's RendezvousServer over TCP, which it also
// hosts in this process when hosts_rendezvous() says so.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "tcp/channel.hpp"
#include "core/node_identity.hpp"
#include "core/node_rendezvous.hpp"
#include "auth/munge_auth.hpp"
#include "auth/rendezvous_auth.hpp"
#include "tcp/rendezvous_server.hpp"

namespace ddprun::elastic {

class TcpRendezvous final : public NodeRendezvous {
 public:
  // `config` must have passed validate().
  TcpRendezvous(asio::io_context& io, RendezvousConfig config);
  ~TcpRendezvous() override;

  // Hosts the server if this node should, then connects to the endpoint, retrying until
  // join_timeout (the hosting node may start later), and joins.
  void join(Handlers handlers) override;

 private:
  void report(const nlohmann::json& message) override { send(message); }
  void leave_job(int signal, const std::string& quarantined) override;
  void when_left(std::function<void()> done) override;
  void release() override;
  bool hosts_server() const override { return server_ != nullptr; }

  void host_if_chosen();
  void connect();
  void connect_to(const asio::ip::tcp::endpoint& endpoint);
  void retry_connect(const std::string& error);
  void arm_join_timer();
  void reconnect(const std::string& why);
  void probe_for_torchrun(const std::string& why);
  void on_connected(asio::ip::tcp::socket socket);
  void on_message(const nlohmann::json& message);
  void on_handshake_message(const nlohmann::json& message);
  void send_join();
  void close_channel();
  void channel_closed();
  void send(const nlohmann::json& message);

  RendezvousConfig config_;
  Endpoint endpoint_;
  std::string endpoint_text_;
  std::unique_ptr<RendezvousServer> server_;
  std::optional<asio::ip::address> bind_address_;  // --local_addr, as this node's source address
  asio::ip::tcp::resolver resolver_;
  asio::ip::tcp::socket connecting_;
  asio::steady_timer join_timer_;
  std::chrono::steady_clock::time_point join_deadline_;
  bool reconnect_reported_ = false;
  asio::steady_timer retry_timer_;
  double connect_retry_;  // seconds until the next attempt to reach the endpoint
  std::string last_connect_error_;
  asio::ip::tcp::endpoint connected_to_;  // the endpoint's address last tried
  std::chrono::steady_clock::time_point connect_started_;  // the last attempt's: the host accepted it after
  std::shared_ptr<Channel> channel_;
  int held_fd_ = -1;  // the channel's descriptor, while the launcher's handlers hold a copy of it
  NodeAuth auth_;                       // the secret or MUNGE; neither: open
  std::optional<Handshake> handshake_;  // authenticating: from connecting until the host proved itself
  std::string client_nonce_;            // this connection's, for the host's MUNGE credential
};

}  // namespace ddprun::elastic
