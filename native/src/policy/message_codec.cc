#include "policy/message_codec.h"

#include <cstring>
#include <string>

#include "base/error.h"

namespace fuseopt {
namespace {

class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    const char* p = reinterpret_cast<const char*>(&v);
    buf_.insert(buf_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    put<uint32_t>(static_cast<uint32_t>(v.size()));
    for (const T& x : v) put(x);
  }
  std::vector<char> take() { return std::move(buf_); }

 private:
  std::vector<char> buf_;
};

class Reader {
 public:
  Reader(const char* data, size_t size) : p_(data), end_(data + size) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string get_string() {
    uint32_t n = get<uint32_t>();
    need(n);
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> get_vector() {
    uint32_t n = get<uint32_t>();
    std::vector<T> v(n);
    for (auto& x : v) x = get<T>();
    return v;
  }
  bool done() const { return p_ == end_; }

 private:
  void need(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n)
      throw Error(FUSEOPT_INTERNAL, "truncated negotiation message");
  }
  const char* p_;
  const char* end_;
};

void put_spec(Writer& w, const TensorSpec& s) {
  w.put<int32_t>(s.collective);
  w.put_string(s.name);
  w.put<int32_t>(s.dtype);
  w.put<int32_t>(s.reduce_op);
  w.put_vector(s.shape);
  w.put(s.root);
  w.put(s.prescale);
  w.put(s.postscale);
  w.put<int32_t>(s.device);
  w.put<int32_t>(s.phase);
}

TensorSpec get_spec(Reader& r) {
  TensorSpec s;
  s.collective = static_cast<fuseopt_collective_t>(r.get<int32_t>());
  s.name = r.get_string();
  s.dtype = static_cast<fuseopt_dtype_t>(r.get<int32_t>());
  s.reduce_op = static_cast<fuseopt_reduce_op_t>(r.get<int32_t>());
  s.shape = r.get_vector<int64_t>();
  s.root = r.get<int32_t>();
  s.prescale = r.get<double>();
  s.postscale = r.get<double>();
  s.device = static_cast<fuseopt_device_t>(r.get<int32_t>());
  s.phase = r.get<int32_t>();
  return s;
}

}  // namespace

std::vector<char> encode_requests(const std::vector<Request>& requests) {
  Writer w;
  w.put<uint32_t>(static_cast<uint32_t>(requests.size()));
  for (const auto& q : requests) {
    w.put(q.rank);
    put_spec(w, q.spec);
    w.put(q.waited_s);
  }
  return w.take();
}

std::vector<Request> decode_requests(const char* data, size_t size) {
  Reader r(data, size);
  std::vector<Request> out(r.get<uint32_t>());
  for (auto& q : out) {
    q.rank = r.get<int32_t>();
    q.spec = get_spec(r);
    q.waited_s = r.get<double>();
  }
  return out;
}

std::vector<char> encode_responses(const std::vector<Response>& responses) {
  Writer w;
  w.put<uint32_t>(static_cast<uint32_t>(responses.size()));
  for (const auto& p : responses) {
    put_spec(w, p.spec);
    w.put_vector(p.first_dims);
    w.put_vector(p.joined);
    w.put<int32_t>(p.error);
    w.put_string(p.error_message);
  }
  return w.take();
}

std::vector<Response> decode_responses(const char* data, size_t size) {
  Reader r(data, size);
  std::vector<Response> out(r.get<uint32_t>());
  for (auto& p : out) {
    p.spec = get_spec(r);
    p.first_dims = r.get_vector<int64_t>();
    p.joined = r.get_vector<int32_t>();
    p.error = static_cast<fuseopt_status_t>(r.get<int32_t>());
    p.error_message = r.get_string();
  }
  return out;
}

}  // namespace fuseopt
