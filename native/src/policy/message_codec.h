// Byte encoding of requests and responses for the trip between ranks. Every
// rank runs the same binary, so the encoding is host-endian and unversioned;
// it only has to be compact and round-trip exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "base/message.h"

namespace fuseopt {

std::vector<char> encode_requests(const std::vector<Request>& requests);
std::vector<Request> decode_requests(const char* data, size_t size);

std::vector<char> encode_responses(const std::vector<Response>& responses);
std::vector<Response> decode_responses(const char* data, size_t size);

}  // namespace fuseopt
