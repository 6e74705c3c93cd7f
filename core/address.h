// Network addresses as people write them: "host:port".
#pragma once

#include <string>

#include "core/status.h"

namespace troupe {

// Splits "host:port" (the port in 1-65535; a host is a name, an IPv4 address or an IPv6
// address in brackets, returned without them). Errors (INVALID_ARGUMENT) quote `text`.
status parse_host_port(const std::string& text, std::string* host, int* port);

}  // namespace troupe
