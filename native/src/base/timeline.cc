#include "base/timeline.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>

#include "base/error.h"
#include "base/poll_schedule.h"

namespace fuseopt {
namespace {

constexpr auto kFlushInterval = std::chrono::milliseconds(100);
constexpr char kClosing[] = "\n]\n";

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

void Timeline::start(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> serial(stop_mu_);
  if (on()) throw Error(FUSEOPT_INVALID_ARG, "a timeline is already being written; stop it first");
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f)
    throw Error(FUSEOPT_INVALID_ARG,
                "cannot write the timeline to '" + path + "': " + std::strerror(errno));
  std::fputs("[", f);
  std::fputs(kClosing, f);
  std::fflush(f);
  file_ = f;
  first_ = true;
  origin_s_ = now_s();
  rows_.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = false;
    queue_.clear();
  }
  mark_cycles_ = mark_cycles;
  writer_ = std::thread([this] { write_loop(); });
  on_ = true;
}

void Timeline::stop() {
  std::lock_guard<std::mutex> serial(stop_mu_);
  if (!writer_.joinable()) return;
  on_ = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  writer_.join();
  std::fclose(file_);
  file_ = nullptr;
}

void Timeline::push(Event e) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(e));
}

void Timeline::span(const std::string& tensor, const char* name, double begin_s, double end_s,
                    std::string args) {
  if (on()) push(Event{tensor, name, 'X', begin_s, end_s, std::move(args)});
}

void Timeline::instant(const std::string& tensor, const char* name, double at_s,
                       std::string args) {
  if (on()) push(Event{tensor, name, 'i', at_s, at_s, std::move(args)});
}

void Timeline::cycle(double at_s) {
  if (marks_cycles()) push(Event{"", "CYCLE", 'i', at_s, at_s, ""});
}

void Timeline::write_loop() {
  std::vector<Event> batch;
  for (;;) {
    bool last;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, kFlushInterval, [&] { return stopping_; });
      batch.swap(queue_);
      last = stopping_;
    }
    if (!batch.empty()) write(batch);
    batch.clear();
    if (last) return;
  }
}

int Timeline::row(const std::string& tensor, std::string* out) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  const int pid = tensor.empty() ? 0 : static_cast<int>(rows_.size()) + 1;
  rows_.emplace(tensor, pid);
  // Metadata: the row's label, and rows in order of first appearance.
  std::ostringstream m;
  m << (first_ ? "\n" : ",\n") << "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << pid
    << ", \"args\": {\"name\": " << json_string(tensor.empty() ? "(cycles)" : tensor) << "}},\n"
    << "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " << pid
    << ", \"args\": {\"sort_index\": " << pid << "}}";
  *out += m.str();
  first_ = false;
  return pid;
}

void Timeline::write(const std::vector<Event>& events) {
  std::string text;
  for (const Event& e : events) {
    const int pid = row(e.tensor, &text);
    char head[160];
    std::snprintf(head, sizeof head, "%s{\"name\": \"%s\", \"ph\": \"%c\", \"pid\": %d, \"tid\": 0, "
                  "\"ts\": %.3f", first_ ? "\n" : ",\n", e.name, e.phase, pid,
                  (e.begin_s - origin_s_) * 1e6);
    text += head;
    first_ = false;
    if (e.phase == 'X') {
      std::snprintf(head, sizeof head, ", \"dur\": %.3f", (e.end_s - e.begin_s) * 1e6);
      text += head;
    } else {
      text += ", \"s\": \"p\"";  // an instant event scoped to its row
    }
    if (!e.args.empty()) text += ", \"args\": {" + e.args + "}";
    text += "}";
  }
  // Overwrite the closing bracket of the previous flush, then close again.
  std::fseek(file_, -static_cast<long>(sizeof(kClosing) - 1), SEEK_END);
  text += kClosing;
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
}

}  // namespace fuseopt
