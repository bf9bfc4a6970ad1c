// pocket serve while its model loads (serve/server.h, ModelLoader): /health answers 503
// {"status":"loading"} and every other request a 503 with Retry-After until the model is ready,
// then 200 {"status":"ok"}; a load that fails ends Serve with its error.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "model/model.h"
#include "serve/server.h"

namespace pocket::serve {
namespace {

const std::string kStories =
    std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/stories260K.bin";
const std::string kTok = std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/tok512.bin";

// One HTTP/1.1 request on a fresh connection: the status code and the whole response.
int Request(int port, const std::string& method, const std::string& path, std::string* response) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  const std::string body = method == "POST" ? R"({"model":"stories","prompt":"Once"})" : "";
  const std::string req = method + " " + path +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                          "Content-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return -1;
  }
  response->clear();
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) response->append(buf, static_cast<size_t>(n));
  close(fd);
  if (response->compare(0, 9, "HTTP/1.1 ") != 0) return -1;
  return std::atoi(response->c_str() + 9);
}

ServeOptions Options() {
  ServeOptions o;
  o.port = 0;
  o.parallel = 1;
  o.n_threads = 1;
  o.n_ctx = 256;
  o.model_name = "stories";
  return o;
}

TEST(ServeLoadingTest, HealthSaysLoadingUntilTheModelIsReady) {
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  std::promise<void> ready;
  ServeOptions o = Options();
  o.on_ready = [&ready] { ready.set_value(); };
  auto server = Server::Create(
      [gate]() -> StatusOr<ServeModel> {
        gate.wait();  // the test looks at the server meanwhile
        LoadOptions lo;
        lo.tokenizer_path = kTok;
        POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(kStories, lo));
        return ServeModel{model, {}};
      },
      o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Bind().ok());
  const int port = (*server)->port();
  Status served;
  std::thread serving([&] { served = (*server)->Serve(); });
  std::string response;
  EXPECT_EQ(Request(port, "GET", "/health", &response), 503) << response;
  EXPECT_NE(response.find(R"({"status":"loading"})"), std::string::npos) << response;
  EXPECT_NE(response.find("Retry-After: 1"), std::string::npos) << response;
  EXPECT_EQ(Request(port, "POST", "/v1/completions", &response), 503) << response;
  EXPECT_NE(response.find("model_loading"), std::string::npos) << response;
  go.set_value();
  ASSERT_EQ(ready.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(Request(port, "GET", "/health", &response), 200) << response;
  EXPECT_NE(response.find(R"({"status":"ok"})"), std::string::npos) << response;
  EXPECT_EQ(Request(port, "POST", "/v1/completions", &response), 200) << response;
  (*server)->Stop();
  serving.join();
  EXPECT_TRUE(served.ok()) << served.ToString();
}

TEST(ServeLoadingTest, AFailedLoadEndsServeWithItsError) {
  auto server = Server::Create(
      []() -> StatusOr<ServeModel> { return NotFoundError("no such model file m.gguf"); },
      Options());
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE((*server)->Bind().ok());
  const Status served = (*server)->Serve();
  EXPECT_EQ(served.code(), StatusCode::kNotFound);
  EXPECT_NE(served.message().find("m.gguf"), std::string::npos) << served.ToString();
}

}  // namespace
}  // namespace pocket::serve
