// What the NCCL and HCCL backends share: one communicator over all ranks made
// from an id that rank 0 creates, one stream of the backend's own, and the
// events that order it after the framework's work and tell when it is done.
//
// A derived backend supplies the library's calls (the pure virtuals below);
// this class owns the order they run in:
//  - connect(): every step that can fail on one rank alone is agreed on by
//    all ranks (first_error_everywhere) before the next collective step, so a
//    failure is an error everywhere, not a hang;
//  - synchronize(): polls an event recorded after the enqueued work and,
//    between polls, the library's asynchronous error, so that a dead peer
//    ends the wait instead of blocking it forever.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "transport/device/device_backend.h"

namespace fuseopt {

class StreamBackend : public DeviceBackend {
 public:
  void copy(void* dst, const void* src, int64_t bytes) override {
    enqueue_copy(dst, src, bytes, kDeviceToDevice);
  }
  void upload(void* dst, const void* host, int64_t bytes) override {
    enqueue_copy(dst, host, bytes, kHostToDevice);
  }
  void download(void* host, const void* src, int64_t bytes) override {
    enqueue_copy(host, src, bytes, kDeviceToHost);
  }
  void wait_for(void* stream, void* event) override;
  void synchronize() override;

  // Collective over all ranks: the communicator, the stream and its events.
  void connect();

 protected:
  enum Direction { kHostToDevice, kDeviceToHost, kDeviceToDevice };

  // library: "NCCL"; device: "cuda" (messages say "cuda:<id>").
  StreamBackend(const char* library, const char* device, const DeviceSetup& setup)
      : library_(library), device_(device), setup_(setup) {}

  // ---- the library's steps, each on this rank alone; they throw Error ----
  // Makes the device current. Returns the communicator's id, filled on rank
  // 0 and of the same size (unfilled) elsewhere; connect() broadcasts it.
  virtual std::vector<char> open_device() = 0;
  virtual void open_communicator(const std::vector<char>& id) = 0;
  // After every rank has its communicator (hierarchical set-up, notices).
  virtual void connected() {}
  virtual void* create_stream() = 0;
  virtual void* create_event() = 0;
  virtual void record(void* event, void* stream) = 0;
  virtual void stream_wait(void* event) = 0;  // our stream waits for event
  virtual bool event_done(void* event) = 0;
  virtual void enqueue_copy(void* dst, const void* src, int64_t bytes, Direction d) = 0;
  // Throws (through peer_failed) when the library reports an asynchronous
  // error: the communicator must not be waited on again.
  virtual void check_async_error() = 0;

  // ---- helpers for the derived backends ----
  // Runs step on this rank; then every rank learns whether any rank failed
  // and, if one did, throws "<what> failed on rank R: <R's message>".
  void agree(const std::string& what, const std::function<void()>& step);
  [[noreturn]] void fail(const std::string& call, const std::string& detail) const;
  [[noreturn]] void peer_failed(const std::string& detail, const std::string& aftermath) const;
  std::string where() const { return std::string(device_) + ":" + std::to_string(setup_.device_id); }
  // Whether every rank's part has the same size (one library call serves).
  static bool even(const std::vector<int64_t>& parts);
  void require_even(const std::vector<int64_t>& recv_counts) const;

  const char* library_;
  const char* device_;
  DeviceSetup setup_;
  int rank_ = 0, size_ = 1;
  void* stream_ = nullptr;
  void* marker_ = nullptr;  // recorded on a framework stream that gave no event
  void* done_ = nullptr;    // recorded on our stream by synchronize()
};

// The hooks above, declared once for every derived backend.
#define FUSEOPT_STREAM_BACKEND_HOOKS                                                   \
  std::vector<char> open_device() override;                                           \
  void open_communicator(const std::vector<char>& id) override;                       \
  void connected() override;                                                          \
  void* create_stream() override;                                                     \
  void* create_event() override;                                                      \
  void record(void* event, void* stream) override;                                    \
  void stream_wait(void* event) override;                                             \
  bool event_done(void* event) override;                                              \
  void enqueue_copy(void* dst, const void* src, int64_t bytes, Direction d) override; \
  void check_async_error() override;

// Loads nothing itself: holds the libraries a derived backend was opened
// with, and connects one backend per device.
template <class B, class Libraries>
class StreamBackendFactory : public DeviceBackendFactory {
 public:
  explicit StreamBackendFactory(std::shared_ptr<Libraries> libs) : libs_(std::move(libs)) {}
  std::unique_ptr<DeviceBackend> connect(const DeviceSetup& setup) override {
    std::unique_ptr<B> b(new B(libs_, setup));
    b->connect();
    return std::unique_ptr<DeviceBackend>(b.release());
  }

 private:
  std::shared_ptr<Libraries> libs_;
};

}  // namespace fuseopt
