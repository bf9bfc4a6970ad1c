#include "serve/http_policy.h"

#include <algorithm>
#include <cctype>

namespace pocket::serve {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool IsDottedQuadIn127(std::string_view h) {
  // 127.a.b.c with decimal parts 0-255.
  int parts = 0;
  size_t i = 0;
  while (i <= h.size()) {
    size_t j = h.find('.', i);
    if (j == std::string_view::npos) j = h.size();
    const std::string_view part = h.substr(i, j - i);
    if (part.empty() || part.size() > 3) return false;
    int value = 0;
    for (char c : part) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    if (value > 255 || (parts == 0 && value != 127)) return false;
    ++parts;
    i = j + 1;
    if (j == h.size()) break;
  }
  return parts == 4;
}

}  // namespace

bool IsLoopbackHost(std::string_view host) {
  std::string h = Lower(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  return h == "localhost" || h == "::1" || h == "0:0:0:0:0:0:0:1" || IsDottedQuadIn127(h);
}

std::string HostHeaderName(std::string_view header) {
  std::string h = Lower(header);
  while (!h.empty() && (h.back() == ' ' || h.back() == '\t')) h.pop_back();
  const size_t start = h.find_first_not_of(" \t");
  h = start == std::string::npos ? std::string() : h.substr(start);
  if (!h.empty() && h.front() == '[') {
    const size_t close = h.find(']');
    return close == std::string::npos ? h : h.substr(1, close - 1);
  }
  const size_t colon = h.find(':');
  if (colon != std::string::npos && h.find(':', colon + 1) == std::string::npos) {
    h.resize(colon);  // name:port (a bare IPv6 address has several colons and no port)
  }
  if (!h.empty() && h.back() == '.') h.pop_back();  // "localhost." is "localhost"
  return h;
}

std::string HostRefusal(const HttpPolicy& policy, std::string_view host_header) {
  if (!IsLoopbackHost(policy.bind_host) || host_header.empty()) return "";
  const std::string name = HostHeaderName(host_header);
  if (IsLoopbackHost(name)) return "";
  for (const std::string& allowed : policy.allowed_hosts) {
    if (Lower(allowed) == name) return "";
  }
  return "the Host header names '" + name.substr(0, 100) +
         "', not this server (a loopback address or localhost; more names with --allowed-host)";
}

std::optional<std::string> CorsAllowOrigin(const HttpPolicy& policy, std::string_view origin) {
  for (const std::string& allowed : policy.cors_origins) {
    if (allowed == "*") return std::string("*");
    if (allowed == origin) return std::string(origin);
  }
  return std::nullopt;
}

std::string ClientRequestId(std::string_view header) {
  if (header.empty() || header.size() > 128) return "";
  for (char c : header) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return "";
  }
  return std::string(header);
}

}  // namespace pocket::serve
