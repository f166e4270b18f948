// munged's behaviour for what MUNGE's key exchange (elastic/src/auth/munge_auth.hpp) relies on,
// with the caller's uid set by the test (as each process's real uid is): the sender's uid is
// stamped, only the named uid decodes, a credential decodes once. Thread-safe: replicators call
// it from their threads. `as(uid)`: another process, of `uid`, on the same munged.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "auth/munge_auth.hpp"

namespace ddprun::elastic {

class FakeMunge final : public CredentialService {
 public:
  uid_t caller = 1000;

  std::shared_ptr<FakeMunge> as(uid_t uid) const {
    auto other = std::make_shared<FakeMunge>();
    other->state_ = state_;
    other->caller = uid;
    return other;
  }

  std::string encode(std::string_view payload, uid_t decoder_uid) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    const std::string id = "cred" + std::to_string(state_->next++);
    state_->issued[id] = {std::string(payload), caller, decoder_uid, false};
    return id;
  }

  MungeCredential decode(const std::string& credential) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    const auto it = state_->issued.find(credential);
    if (it == state_->issued.end()) throw MungeError("Invalid credential");
    if (it->second.decoder != caller) throw MungeError("Unauthorized credential for client UID");
    if (it->second.decoded) throw MungeError("Replayed credential");
    it->second.decoded = true;
    return {it->second.payload, it->second.uid, 100};
  }

 private:
  struct Issued {
    std::string payload;
    uid_t uid;
    uid_t decoder;
    bool decoded;
  };
  struct State {
    std::mutex mutex;
    std::map<std::string, Issued> issued;
    int next = 0;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace ddprun::elastic
