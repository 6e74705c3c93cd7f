#include "core/address.h"

#include <algorithm>
#include <cctype>

namespace troupe {

status parse_host_port(const std::string& text, std::string* host, int* port) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return invalid_argument_error("address '", text, "' is not host:port");
  }
  std::string h = text.substr(0, colon);
  if (h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty() || std::any_of(h.begin(), h.end(), [](unsigned char c) {
        return std::isspace(c) || c == '/' || c == '[' || c == ']';
      })) {
    return invalid_argument_error("address '", text, "' has no valid host");
  }
  const std::string p = text.substr(colon + 1);
  if (p.size() > 5 || !std::all_of(p.begin(), p.end(), [](unsigned char c) { return std::isdigit(c); }) ||
      std::stoi(p) < 1 || std::stoi(p) > 65535) {
    return invalid_argument_error("address '", text, "' has port '", p, "', not a number in 1-65535");
  }
  *host = std::move(h);
  *port = std::stoi(p);
  return status();
}

}  // namespace troupe
