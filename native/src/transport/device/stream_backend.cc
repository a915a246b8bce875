#include "transport/device/stream_backend.h"

#include "base/error.h"
#include "base/poll_schedule.h"

namespace fuseopt {

void StreamBackend::connect() {
  rank_ = setup_.rank;
  size_ = setup_.size;
  const std::string set_up = std::string(library_) + " set-up";
  std::vector<char> id;
  agree(set_up, [&] { id = open_device(); });
  setup_.host->broadcast(id.data(), static_cast<int64_t>(id.size()), FUSEOPT_UINT8, 0);
  agree(set_up, [&] {
    open_communicator(id);
    stream_ = create_stream();
    marker_ = create_event();
    done_ = create_event();
  });
  connected();
}

void StreamBackend::agree(const std::string& what, const std::function<void()>& step) {
  std::string error;
  try {
    step();
  } catch (const Error& e) {
    error = e.what();
  }
  const std::string agreed = first_error_everywhere(*setup_.host, size_, error);
  if (!agreed.empty()) throw Error(FUSEOPT_BACKEND, what + " failed on " + agreed);
}

void StreamBackend::wait_for(void* stream, void* event) {
  if (!event) {
    // No event from the framework: mark "now" on its stream ourselves.
    record(marker_, stream);
    event = marker_;
  }
  stream_wait(event);
}

void StreamBackend::synchronize() {
  // Poll rather than block in the library's stream synchronize: a collective
  // whose peer has died never finishes, and only the asynchronous error says so.
  record(done_, stream_);
  poll_until(
      [&] {
        if (event_done(done_)) return true;
        check_async_error();
        return false;
      },
      kStreamPoll);
}

void StreamBackend::fail(const std::string& call, const std::string& detail) const {
  throw Error(FUSEOPT_BACKEND, call + " failed on " + where() + ": " + detail);
}

void StreamBackend::peer_failed(const std::string& detail, const std::string& aftermath) const {
  throw Error(FUSEOPT_BACKEND, std::string(library_) + " reported an asynchronous error on " +
                                   where() + ": " + detail +
                                   ". A peer rank has probably failed or lost its network; " +
                                   aftermath);
}

bool StreamBackend::even(const std::vector<int64_t>& parts) {
  for (int64_t p : parts)
    if (p != parts[0]) return false;
  return true;
}

void StreamBackend::require_even(const std::vector<int64_t>& recv_counts) const {
  if (!even(recv_counts)) unsupported("reducescatter with uneven parts (the executor pads)");
}

}  // namespace fuseopt
