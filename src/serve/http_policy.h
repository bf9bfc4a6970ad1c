// What pocket serve accepts from a browser, as the servers people trust on localhost do: a page
// on any web site can make the browser send requests to 127.0.0.1, so while bound to a loopback
// address a request must name this server in its Host header (DNS rebinding points another name
// at 127.0.0.1), and a request that carries an Origin (every cross-origin request a browser
// sends) is served only when --cors-origin allows that origin. Requests without an Origin (curl,
// SDKs) are unaffected. Pure functions: the server applies them before it reads a body.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pocket::serve {

struct HttpPolicy {
  std::string bind_host;                   // the address the server listens on
  std::vector<std::string> allowed_hosts;  // --allowed-host: more names the Host may give
  std::vector<std::string> cors_origins;   // --cors-origin: origins served ("*": any)
};

// 127.0.0.0/8, ::1 (bracketed or not) and "localhost" (any case).
bool IsLoopbackHost(std::string_view host);

// The name in a Host header, lower-cased, without its port ("Example.com:8080" -> "example.com",
// "[::1]:8080" -> "::1").
std::string HostHeaderName(std::string_view header);

// Empty when the Host header is acceptable; else why not (for a 403). A server bound to a
// loopback address accepts loopback names and addresses and the --allowed-host names; one bound
// elsewhere accepts any Host. A request without a Host header (HTTP/1.0) is accepted.
std::string HostRefusal(const HttpPolicy& policy, std::string_view host_header);

// The Access-Control-Allow-Origin value for a request with this Origin ("*" or the origin), or
// nullopt when --cors-origin does not allow it (the request is refused).
std::optional<std::string> CorsAllowOrigin(const HttpPolicy& policy, std::string_view origin);

// The request id an access-log line and the X-Request-Id response header carry: the client's
// X-Request-Id when it is 1-128 characters of [A-Za-z0-9._:-], else empty (make one).
std::string ClientRequestId(std::string_view header);

}  // namespace pocket::serve
