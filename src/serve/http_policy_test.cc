#include "serve/http_policy.h"

#include <gtest/gtest.h>

namespace pocket::serve {
namespace {

TEST(HttpPolicyTest, LoopbackNamesAndHostHeaders) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.1.2.3"));
  EXPECT_TRUE(IsLoopbackHost("LocalHost"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("[::1]"));
  EXPECT_FALSE(IsLoopbackHost("127.0.0.1.evil.example"));
  EXPECT_FALSE(IsLoopbackHost("128.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("127.0.0.256"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("localhost.evil.example"));
  EXPECT_EQ(HostHeaderName("Example.COM:8080"), "example.com");
  EXPECT_EQ(HostHeaderName("[::1]:8080"), "::1");
  EXPECT_EQ(HostHeaderName("localhost."), "localhost");
  EXPECT_EQ(HostHeaderName(" 127.0.0.1 "), "127.0.0.1");
}

TEST(HttpPolicyTest, DnsRebindingIsRefusedOnLoopbackOnly) {
  HttpPolicy p;
  p.bind_host = "127.0.0.1";
  EXPECT_EQ(HostRefusal(p, "127.0.0.1:8080"), "");
  EXPECT_EQ(HostRefusal(p, "localhost:8080"), "");
  EXPECT_EQ(HostRefusal(p, ""), "");  // HTTP/1.0 without Host: no browser sends that
  const std::string why = HostRefusal(p, "attacker.example:8080");
  EXPECT_NE(why.find("attacker.example"), std::string::npos) << why;
  EXPECT_NE(why.find("--allowed-host"), std::string::npos) << why;
  p.allowed_hosts = {"Pocket.Internal"};
  EXPECT_EQ(HostRefusal(p, "pocket.internal:8080"), "");
  p.bind_host = "0.0.0.0";  // reachable by other names on purpose: the API key guards it
  EXPECT_EQ(HostRefusal(p, "attacker.example"), "");
}

TEST(HttpPolicyTest, OriginsNeedCorsOrigin) {
  HttpPolicy p;
  EXPECT_FALSE(CorsAllowOrigin(p, "https://evil.example"));
  p.cors_origins = {"https://app.example"};
  EXPECT_EQ(CorsAllowOrigin(p, "https://app.example"), "https://app.example");
  EXPECT_FALSE(CorsAllowOrigin(p, "https://app.example.evil"));
  EXPECT_FALSE(CorsAllowOrigin(p, "null"));
  p.cors_origins.push_back("*");
  EXPECT_EQ(CorsAllowOrigin(p, "https://any.example"), "*");
}

TEST(HttpPolicyTest, RequestIdsAreKeptOnlyWhenPlain) {
  EXPECT_EQ(ClientRequestId("abc-123_x.y:z"), "abc-123_x.y:z");
  EXPECT_EQ(ClientRequestId(""), "");
  EXPECT_EQ(ClientRequestId("a b"), "");
  EXPECT_EQ(ClientRequestId("line\r\nInjected: 1"), "");
  EXPECT_EQ(ClientRequestId(std::string(129, 'a')), "");
}

}  // namespace
}  // namespace pocket::serve
