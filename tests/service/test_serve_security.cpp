// `shardtopk serve` with keys, TLS and an audit log, end to end on CPU ranks:
//
//  KeysRolesRevocationAndAudit: missing, malformed, wrong keys (401 with WWW-Authenticate), a
//    read key on the write routes (403), each role on its routes; a key removed from the file
//    and SIGHUP (revoked: 401, while an open keep-alive connection goes on); a bad file and
//    SIGHUP (the old keys stay); an audit line, in order, for every write and every refusal.
//  Tls: curl and an HTTPS client over TLS with the test's CA (a client without it refuses the
//    certificate); keys over TLS, /metrics open with service.auth.open_metrics; TLS 1.2 and 1.3
//    taken, TLS 1.1 refused; a plaintext request to the TLS port
//    is closed without an answer, and the port goes on serving.
//  StartUpRefusals: open writes on 0.0.0.0, an expired certificate, a key that is not the
//    certificate's, a bad or missing keys file: each stops the start-up naming the file (or how
//    to add keys); with service.auth.allow_open_writes the same service starts.
//  RateLimitedFloodLeavesOtherKeysAlone: one key floods far beyond its rate (429 with
//    Retry-After, the connection kept) while another key's latency distribution stays within
//    1.5 x its p99 alone.
//  Keygen: `shardtopk keygen` prints a key and its line, whose digest is the key's.
// The certificates are made by the test (certtool, tls_support.hpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>

#include "core/stats.hpp"
#include "serve_support.hpp"
#include "service/api_keys.hpp"
#include "service/request_parse.hpp"
#include "shardtopk/corpus_io.hpp"
#include "tls_support.hpp"

namespace shardtopk::test {
namespace {

using ::testing::HasSubstr;

constexpr std::int64_t kN = 32000, kDim = 128;

struct Shell {
  int rc = -1;
  std::string out;  // stdout and stderr
};

// A shell command's exit status and output.
Shell sh(const std::string& cmd) {
  Shell s;
  std::FILE* p = ::popen((cmd + " 2>&1 </dev/null").c_str(), "r");
  if (!p) return s;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) s.out.append(buf, n);
  const int st = ::pclose(p);
  s.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return s;
}

struct Key {
  std::string name, role, key;
};

// Keys made as an operator makes them: `shardtopk keygen`, its line into the keys file.
Key keygen(const std::string& name, const std::string& role, const std::string& limits = "") {
  const Shell s = sh(std::string(SHARDTOPK_BIN) + " keygen --name " + name + " --role " + role + " " + limits);
  EXPECT_EQ(s.rc, 0) << s.out;
  return Key{name, role, s.out.substr(s.out.find('\n') + 1, 47)};
}
std::string line_of(const Key& k, const std::string& limits = "") {
  return k.name + " " + k.role + " " + service::to_hex(service::sha256(k.key.data(), k.key.size())) + limits + "\n";
}

struct Files {
  TempDir dir;
  std::string corpus, config, keys, audit;
  std::vector<float> queries;  // [8, kDim]
  const float* q(int i) const { return queries.data() + static_cast<std::size_t>(i) * kDim; }
};

// A corpus, a keys file and a config: `service_extra` goes under service:, `storage` adds a
// storage directory (writes).
void make_files(Files& f, const std::string& keys_text, const std::string& service_extra, bool storage) {
  f.corpus = f.dir.file("corpus.h5");
  {
    const std::vector<float> v = random_floats(static_cast<std::size_t>(kN * kDim), 7);
    H5Writer w(f.corpus);
    w.write_f32("train", v.data(), kN, kDim);
  }
  f.queries = random_floats(8 * kDim, 8);
  f.keys = f.dir.file("keys");
  f.audit = f.dir.file("audit.log");
  write_text(f.keys, keys_text);
  f.config = write_config(f.dir.path(), f.corpus, "l2", 16, 8, 200, service_extra);
  if (storage) write_text(f.config, read_text(f.config) + "storage:\n  dir: " + f.dir.file("wal") + "\n");
}

Reply http(int port, const std::string& method, const std::string& path, const std::string& key,
           const std::string& body = "", const std::string& ctype = "application/json") {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30, 0);
  httplib::Headers h;
  if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
  auto r = method == "GET" ? c.Get(path.c_str(), h) : c.Post(path.c_str(), h, body, ctype.c_str());
  Reply out;
  if (!r) {
    out.body = "no reply: " + httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.body = r->body;
  out.connection = r->get_header_value("WWW-Authenticate");  // the header the 401 tests look at
  return out;
}

std::string upsert_json(std::int64_t id, const float* v) {
  return json{{"ids", {id}}, {"vectors", {std::vector<float>(v, v + kDim)}}}.dump();
}

// Waits until the service's log holds `text` `count` times (a SIGHUP's outcome); false after 10 s.
bool wait_for_log(const Server& s, const std::string& text, int count = 1) {
  for (int i = 0; i < 200; ++i) {
    if (count_of(s.log(), text) >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::vector<json> audit_lines(const std::string& path) {
  std::vector<json> out;
  const std::string text = read_text(path);
  std::size_t at = 0;
  for (std::size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    out.push_back(json::parse(text.substr(at, nl - at)));
  EXPECT_EQ(at, text.size()) << "the audit log ends with a whole line";
  return out;
}

// ------------------------------------------------------------------------------ keys and roles

TEST(ServeSecurity, KeysRolesRevocationAndAudit) {
  const Key reader = keygen("reader", "read"), writer = keygen("writer", "write"), ops = keygen("ops", "admin");
  Files f;
  make_files(f, "# test keys\n" + line_of(reader) + line_of(writer) + line_of(ops),
             "  auth:\n    keys_file: " + f.dir.file("keys") + "\n  audit_log: " + f.dir.file("audit.log") + "\n", true);
  Server s(f.config, f.dir.path(), 2);
  ASSERT_TRUE(s.wait_ready());
  const int port = s.port();
  struct Expect {
    int status;
    std::string key, route;
  };
  std::vector<Expect> audit;  // what the audit log must say, in order
  // An audited answer comes only once its line is in the file.
  auto audited = [&](int status, const std::string& key, const std::string& route) {
    audit.push_back({status, key, route});
    EXPECT_EQ(count_of(read_text(f.audit), "\n"), static_cast<int>(audit.size()))
        << "the answer to " << route << " (" << status << ") came before its audit line";
  };

  // Health is open; everything else needs a key.
  EXPECT_EQ(http(port, "GET", "/healthz", "").status, 200);
  EXPECT_EQ(http(port, "GET", "/readyz", "").status, 200);
  const std::string search = json_queries(f.q(0), 1, kDim, 5);
  Reply r = http(port, "POST", "/v1/search", "", search);
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_THAT(r.body, HasSubstr("Authorization: Bearer KEY"));
  EXPECT_EQ(r.connection, "Bearer realm=\"shardtopk\"");
  audited(401, "", "/v1/search");
  r = http(port, "POST", "/v1/search", "stk_not_a_key", search);
  EXPECT_EQ(r.status, 401);
  EXPECT_THAT(r.body, HasSubstr("unknown API key"));
  EXPECT_EQ(r.connection, "Bearer realm=\"shardtopk\", error=\"invalid_token\"");
  audited(401, "", "/v1/search");
  for (const char* path : {"/v1/info", "/metrics"}) {
    EXPECT_EQ(http(port, "GET", path, "").status, 401) << path;
    audited(401, "", path);
    EXPECT_EQ(http(port, "GET", path, reader.key).status, 200) << path;
  }
  r = http(port, "POST", "/v1/search", reader.key, search);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["ids"][0].size(), 5u);
  // Ranks are reads: the reader's key may ask for them, no key may not.
  const std::string rank = json{{"query", std::vector<float>(f.q(0), f.q(0) + kDim)},
                                {"ids", json::parse(r.body)["ids"][0]}}.dump();
  EXPECT_EQ(http(port, "POST", "/v1/rank", "", rank).status, 401);
  audited(401, "", "/v1/rank");
  r = http(port, "POST", "/v1/rank", reader.key, rank);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["ranks"], json::parse("[1,2,3,4,5]")) << "the search's top 5, in order";
  // The scheme without regard to case; two Authorization headers are one too many.
  RawReply raw = raw_request(port, "GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: bearer " + reader.key + "\r\n\r\n");
  EXPECT_EQ(raw.status, 200) << raw.body;
  raw = raw_request(port, "GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + reader.key +
                              "\r\nAuthorization: Bearer " + ops.key + "\r\n\r\n");
  EXPECT_EQ(raw.status, 401);
  EXPECT_THAT(raw.body, HasSubstr("Authorization given more than once"));
  audited(401, "", "/v1/info");

  // A read key on the write routes, a write key on the snapshot: 403, nothing written.
  const std::string up = upsert_json(900001, f.q(1));
  for (const char* path : {"/v1/upsert", "/v1/delete", "/v1/snapshot"}) {
    r = http(port, "POST", path, reader.key, std::string(path) == "/v1/delete" ? R"({"ids":[1]})" : up);
    EXPECT_EQ(r.status, 403) << path << ": " << r.body;
    EXPECT_THAT(r.body, HasSubstr("key 'reader' has role read"));
    audited(403, "reader", path);
  }
  r = http(port, "POST", "/v1/snapshot", writer.key, "{}");
  EXPECT_EQ(r.status, 403);
  EXPECT_THAT(r.body, HasSubstr("needs role admin"));
  audited(403, "writer", "/v1/snapshot");
  // Each role's writes; a bad write body is audited too.
  r = http(port, "POST", "/v1/upsert", writer.key, up);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::int64_t seq1 = json::parse(r.body)["seq"];
  audited(200, "writer", "/v1/upsert");
  r = http(port, "POST", "/v1/upsert", writer.key, R"({"ids":[1],"vectors":[[1,2]]})");
  EXPECT_EQ(r.status, 400);
  audited(400, "writer", "/v1/upsert");
  r = http(port, "POST", "/v1/delete", ops.key, R"({"ids":[900001, 5]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["deleted"], 2);
  const std::int64_t seq2 = json::parse(r.body)["seq"];
  audited(200, "ops", "/v1/delete");
  r = http(port, "POST", "/v1/snapshot", ops.key, "{}");
  ASSERT_EQ(r.status, 200) << r.body;
  audited(200, "ops", "/v1/snapshot");

  // Revoked: the reader's line removed, SIGHUP to rank 0. An open keep-alive connection goes on.
  const int conn = connect_to(port);
  ASSERT_GE(conn, 0);
  const std::string info_as_writer = "GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + writer.key + "\r\n\r\n";
  std::string buf;
  ASSERT_TRUE(send_all(conn, info_as_writer));
  EXPECT_EQ(read_reply(conn, buf).status, 200);
  write_text(f.keys, line_of(writer) + line_of(ops));
  const pid_t rank0 = s.ranks().at(0);
  ASSERT_EQ(kill(rank0, SIGHUP), 0);
  ASSERT_TRUE(wait_for_log(s, "reloaded: 2 key(s) in force")) << s.log();
  r = http(port, "POST", "/v1/search", reader.key, search);
  EXPECT_EQ(r.status, 401) << "a revoked key";
  audited(401, "", "/v1/search");
  ASSERT_TRUE(send_all(conn, info_as_writer)) << "the connection was dropped";
  EXPECT_EQ(read_reply(conn, buf).status, 200) << "on the connection opened before the reload";
  // A bad file: the keys in force stay, the log says why.
  const Key newbie = keygen("newbie", "read");
  write_text(f.keys, line_of(writer) + line_of(newbie) + "ops admin " + std::string(64, 'X') + "\n");
  ASSERT_EQ(kill(rank0, SIGHUP), 0);
  ASSERT_TRUE(wait_for_log(s, "the previous 2 key(s) stay in force")) << s.log();
  EXPECT_THAT(s.log(), HasSubstr(f.keys + ":3: SHA256"));
  EXPECT_EQ(http(port, "POST", "/v1/search", newbie.key, search).status, 401) << "the bad file's keys are not taken";
  audited(401, "", "/v1/search");
  EXPECT_EQ(http(port, "POST", "/v1/snapshot", ops.key, "{}").status, 200) << "the old keys stay in force";
  audited(200, "ops", "/v1/snapshot");
  ASSERT_TRUE(send_all(conn, info_as_writer));
  EXPECT_EQ(read_reply(conn, buf).status, 200);
  ::close(conn);

  // The audit log: one line per write and per refusal, in order, with the key's name.
  const std::vector<json> lines = audit_lines(f.audit);
  ASSERT_EQ(lines.size(), audit.size()) << read_text(f.audit);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const json& l = lines[i];
    SCOPED_TRACE(l.dump());
    EXPECT_EQ(l["status"], audit[i].status);
    EXPECT_EQ(l["route"], audit[i].route);
    if (audit[i].key.empty()) EXPECT_TRUE(l["key"].is_null());
    else EXPECT_EQ(l["key"], audit[i].key);
    EXPECT_THAT(l["client"].get<std::string>(), HasSubstr("127.0.0.1:"));
    EXPECT_TRUE(l["time"].get<std::string>().size() == 27 && l["time"].get<std::string>().back() == 'Z');
    if (audit[i].status == 200) {
      EXPECT_TRUE(l["seq"].is_number() && l["rows"].is_number());
      EXPECT_FALSE(l.contains("why"));
    } else {
      EXPECT_TRUE(l["seq"].is_null());
      EXPECT_FALSE(l["why"].get<std::string>().empty());
    }
  }
  EXPECT_EQ(lines[10]["seq"], seq1);
  EXPECT_EQ(lines[10]["rows"], 1);
  EXPECT_EQ(lines[12]["seq"], seq2);
  EXPECT_EQ(lines[12]["rows"], 2);
  EXPECT_EQ(lines[1]["token"], service::to_hex(service::sha256("stk_not_a_key", 13)).substr(0, 8));
  EXPECT_EQ(read_text(f.audit).find(reader.key), std::string::npos) << "no key is ever written";
}

// ------------------------------------------------------------------------------ TLS

TEST(ServeSecurity, Tls) {
  if (!have_certtool()) GTEST_SKIP() << "certtool (Debian gnutls-bin) is not installed";
  const Key reader = keygen("reader", "read");
  Files f;
  const TestPki pki = make_test_pki(f.dir.path());
  make_files(f, line_of(reader),
             "  tls:\n    cert_file: " + pki.cert_pem + "\n    key_file: " + pki.key_pem + "\n  auth:\n    keys_file: " +
                 f.dir.file("keys") + "\n    open_metrics: true\n",
             false);
  Server s(f.config, f.dir.path(), 1, "");
  // wait_ready speaks plain HTTP: wait for the port and the log line instead.
  ASSERT_TRUE(wait_for_log(s, "ready: https://")) << s.log();
  // the ready line names the JSON reader's kernel, as this process picks it on this CPU
  EXPECT_THAT(s.log(), HasSubstr("; JSON bodies read by simdjson's " + service::json_reader_kernel() + " kernel"));
  int port = 0;
  std::ifstream(f.dir.file("port")) >> port;
  ASSERT_GT(port, 0);
  const std::string url = "https://127.0.0.1:" + std::to_string(port);
  const std::string curl = "curl -sS --max-time 20 --cacert " + pki.ca_pem + " ";

  Shell c = sh(curl + url + "/healthz");
  EXPECT_EQ(c.rc, 0) << c.out;
  EXPECT_EQ(c.out, R"({"status":"ok"})");
  c = sh("curl -sS --max-time 20 " + url + "/healthz");
  EXPECT_EQ(c.rc, 60) << "a client without the CA refuses the certificate: " << c.out;
  write_text(f.dir.file("q.json"), json_queries(f.q(0), 1, kDim, 4));
  c = sh(curl + "-H 'Authorization: Bearer " + reader.key + "' -H 'Content-Type: application/json' --data-binary @" +
         f.dir.file("q.json") + " " + url + "/v1/search");
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_EQ(json::parse(c.out)["ids"][0].size(), 4u) << c.out;
  c = sh(curl + "-w '%{http_code}' -o /dev/null " + url + "/v1/info");
  EXPECT_EQ(c.out, "401") << "keys apply over TLS";
  c = sh(curl + "-w '%{http_code}' -o /dev/null " + url + "/metrics");
  EXPECT_EQ(c.out, "200") << "service.auth.open_metrics";

#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  {
    httplib::SSLClient cl("127.0.0.1", port);
    cl.set_ca_cert_path(pki.ca_pem.c_str());
    cl.enable_server_certificate_verification(true);
    auto res = cl.Get("/v1/info", httplib::Headers{{"Authorization", "Bearer " + reader.key}});
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(json::parse(res->body)["rows"], kN);
  }
#endif

  // Protocol versions: 1.2 and 1.3 taken, 1.1 refused (GnuTLS's client, which still offers 1.1).
  const std::string cli = "gnutls-cli --x509cafile " + pki.ca_pem + " -p " + std::to_string(port) + " localhost --priority ";
  if (sh("gnutls-cli --version").rc == 0) {
    for (const char* v : {"TLS1.2", "TLS1.3"}) {
      c = sh(cli + "NORMAL:-VERS-ALL:+VERS-" + v);
      EXPECT_EQ(c.rc, 0) << v << ": " << c.out;
      EXPECT_THAT(c.out, HasSubstr(std::string("(") + v + "-X.509)")) << c.out;
      EXPECT_THAT(c.out, HasSubstr("Handshake was completed")) << c.out;
    }
    c = sh(cli + "NORMAL:-VERS-ALL:+VERS-TLS1.1");
    EXPECT_NE(c.rc, 0) << c.out;
    EXPECT_EQ(c.out.find("Handshake was completed"), std::string::npos) << c.out;
    EXPECT_THAT(c.out, HasSubstr("Fatal error")) << c.out;
  } else {
    std::printf("gnutls-cli is not installed: protocol versions not checked\n");
  }

  // Plaintext to the TLS port: closed without an answer (no HTTP reply, no hang); TLS goes on.
  const auto t0 = Clock::now();
  const RawReply plain = raw_request(port, raw_get("/healthz"), 20);
  EXPECT_EQ(plain.status, 0) << plain.body;
  EXPECT_NE(plain.error, "timeout") << "the connection must be closed, not left waiting";
  std::printf("plaintext request to the TLS port: %s after %.3f s\n", plain.error.c_str(), secs_since(t0));
  c = sh(curl + url + "/healthz");
  EXPECT_EQ(c.rc, 0) << c.out;
}

// ------------------------------------------------------------------------------ start-up refusals

TEST(ServeSecurity, StartUpRefusals) {
  Files f;
  const Key writer = keygen("writer", "write");
  make_files(f, line_of(writer), "", true);
  const std::string base = read_text(f.config);
  const TestPki pki = have_certtool() ? make_test_pki(f.dir.path()) : TestPki{};
  // The config with service.host 0.0.0.0 and `service_extra` under service:.
  auto with = [&](const std::string& host, const std::string& service_extra) {
    std::string t = base;
    t.replace(t.find("host: 127.0.0.1"), 15, "host: " + host);
    t.replace(t.find("service:\n"), 9, "service:\n" + service_extra);
    write_text(f.config, t);
  };
  auto refused = [&](const std::vector<std::string>& expect) {
    Server s(f.config, f.dir.path(), 1);
    const int rc = s.wait_exit(60);
    const std::string log = s.log();
    EXPECT_NE(rc, 0) << log;
    EXPECT_NE(rc, -1) << "still running";
    for (const std::string& e : expect) EXPECT_THAT(log, HasSubstr(e));
    EXPECT_EQ(count_of(log, "ready: "), 0) << log;
  };
  with("0.0.0.0", "");
  refused({"service.host '0.0.0.0' is not a loopback address", "without API keys",
           "shardtopk keygen --name NAME --role write", "service.auth.keys_file", "service.auth.allow_open_writes: true"});
  with("127.0.0.1", "  auth:\n    keys_file: " + f.dir.file("no-such-keys") + "\n");
  refused({"service.auth.keys_file '" + f.dir.file("no-such-keys") + "' cannot be read"});
  write_text(f.dir.file("bad-keys"), line_of(writer) + "x superuser " + std::string(64, 'a') + "\n");
  with("127.0.0.1", "  auth:\n    keys_file: " + f.dir.file("bad-keys") + "\n");
  refused({f.dir.file("bad-keys") + ":2: role 'superuser' unknown"});
  with("127.0.0.1", "  audit_log: " + f.dir.file("no/dir/audit.log") + "\n");
  refused({"service.audit_log '" + f.dir.file("no/dir/audit.log") + "' cannot be opened"});
  if (have_certtool()) {
    with("127.0.0.1", "  tls:\n    cert_file: " + pki.expired_pem + "\n    key_file: " + pki.key_pem + "\n");
    refused({"service.tls.cert_file '" + pki.expired_pem + "'", "expired on 2020-02-01"});
    with("127.0.0.1", "  tls:\n    cert_file: " + pki.cert_pem + "\n    key_file: " + pki.other_key_pem + "\n");
    refused({"service.tls.key_file '" + pki.other_key_pem + "' does not go with"});
    with("127.0.0.1", "  tls:\n    cert_file: " + f.dir.file("none.pem") + "\n    key_file: " + pki.key_pem + "\n");
    refused({"service.tls.cert_file '" + f.dir.file("none.pem") + "' cannot be read"});
  }
  // Told explicitly, or with keys, the same service starts on 0.0.0.0.
  for (const std::string& extra : {std::string("  auth:\n    allow_open_writes: true\n"),
                                   "  auth:\n    keys_file: " + f.keys + "\n"}) {
    with("0.0.0.0", extra);
    Server s(f.config, f.dir.path(), 1);
    ASSERT_TRUE(s.wait_ready()) << extra;
    EXPECT_THAT(s.log(), HasSubstr(extra.find("allow") != std::string::npos ? "writes are open to anyone"
                                                                               : "API keys travel in clear text"));
  }
}

// ------------------------------------------------------------------------------ rate limits

struct Latencies {
  std::vector<double> ms;
  int errors = 0;
};

// `n` searches one after the other on one keep-alive connection.
Latencies steady_searches(int port, const std::string& key, const Files& f, int n) {
  httplib::Client c("127.0.0.1", port);
  c.set_keep_alive(true);
  c.set_tcp_nodelay(true);
  c.set_read_timeout(30, 0);
  const httplib::Headers h{{"Authorization", "Bearer " + key}};
  const std::string body(reinterpret_cast<const char*>(f.q(1)), kDim * 4);
  Latencies l;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    auto r = c.Post("/v1/search?k=10", h, body, "application/octet-stream");
    if (!r || r->status != 200) ++l.errors;
    else l.ms.push_back(secs_since(t0) * 1e3);
  }
  return l;
}

TEST(ServeSecurity, RateLimitedFloodLeavesOtherKeysAlone) {
  constexpr double kRate = 5;
  constexpr int kBurst = 5;
  const Key flood = keygen("flood", "read"), steady = keygen("steady", "read");
  Files f;
  make_files(f, line_of(flood, " rate=5 burst=5") + line_of(steady),
             "  io_threads: 2\n  auth:\n    keys_file: " + f.dir.file("keys") + "\n", false);
  Server s(f.config, f.dir.path(), 1);
  ASSERT_TRUE(s.wait_ready());
  const int port = s.port();
  steady_searches(port, steady.key, f, 50);  // warm-up

  // The flood: 4 clients at about 100 requests/s each, 80 x the key's rate, on keep-alive
  // connections (a 429 keeps the connection).
  struct FloodCount {
    std::atomic<long> ok{0}, limited{0}, other{0}, reconnects{0};
    std::atomic<bool> retry_after{true};
  };
  auto run_flood = [&](FloodCount& fc, std::atomic<bool>& stop) {
    std::vector<std::thread> th;
    for (int t = 0; t < 4; ++t)
      th.emplace_back([&] {
        const std::string body(reinterpret_cast<const char*>(f.q(2)), kDim * 4);
        std::string buf;
        const std::string req = "POST /v1/search?k=10 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + flood.key +
                                "\r\nContent-Type: application/octet-stream\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
        int conn = connect_to(port);
        while (!stop.load()) {
          const auto t0 = Clock::now();
          RawReply r;
          if (conn >= 0 && send_all(conn, req)) r = read_reply(conn, buf, 30);
          if (r.status == 200) fc.ok++;
          else if (r.status == 429) {
            fc.limited++;
            if (r.headers["retry-after"] != "1") fc.retry_after = false;
          } else {
            fc.other++;
          }
          if (r.status == 0 || r.headers["connection"] == "close") {  // reconnect
            fc.reconnects++;
            if (conn >= 0) ::close(conn);
            conn = connect_to(port);
            buf.clear();
          }
          std::this_thread::sleep_until(t0 + std::chrono::milliseconds(10));
        }
        if (conn >= 0) ::close(conn);
      });
    return th;
  };

  bool within = false;
  for (int round = 0; round < 3 && !within; ++round) {
    const Latencies solo = steady_searches(port, steady.key, f, 800);
    FloodCount fc;
    std::atomic<bool> stop{false};
    const auto t0 = Clock::now();
    std::vector<std::thread> th = run_flood(fc, stop);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const Latencies flooded = steady_searches(port, steady.key, f, 800);
    stop = true;
    for (auto& t : th) t.join();
    const double seconds = secs_since(t0);
    EXPECT_EQ(solo.errors + flooded.errors, 0);
    // The flood got its rate and no more, each refusal a 429 with Retry-After on a kept connection.
    EXPECT_GT(fc.limited.load(), 20 * fc.ok.load()) << "the flood went far beyond its rate";
    EXPECT_LE(fc.ok.load(), static_cast<long>(kBurst + kRate * seconds + 1));
    EXPECT_EQ(fc.other.load(), 0);
    EXPECT_TRUE(fc.retry_after.load());
    EXPECT_LE(fc.reconnects.load(), 0) << "a 429 keeps its connection";
    const double p50s = percentile(solo.ms, 50), p99s = percentile(solo.ms, 99);
    const double p50f = percentile(flooded.ms, 50), p99f = percentile(flooded.ms, 99);
    std::printf("round %d: flood %.1f s, %ld admitted, %ld refused (429); steady key p50/p99 alone %.3f/%.3f ms, "
                "beside the flood %.3f/%.3f ms (%.2f x p99)\n",
                round, seconds, fc.ok.load(), fc.limited.load(), p50s, p99s, p50f, p99f, p99f / p99s);
    within = p99f <= 1.5 * p99s;
  }
  // Under ASan every request runs several times slower and the flood's 429s compete with the
  // steady key for the same two cores: the ratio is printed, and asserted in plain builds only.
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool kLatencyMeaningful = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  constexpr bool kLatencyMeaningful = false;
#else
  constexpr bool kLatencyMeaningful = true;
#endif
#else
  constexpr bool kLatencyMeaningful = true;
#endif
  if (kLatencyMeaningful)
    EXPECT_TRUE(within) << "the steady key's p99 beside the flood stayed above 1.5 x its p99 alone in 3 rounds";
  else if (!within)
    std::printf("the steady key's p99 ratio is not asserted under AddressSanitizer\n");
}

// ------------------------------------------------------------------------------ launch/serve.sh

// The launcher passes SIGHUP to rank 0 (mpirun would end the job on it) and SIGTERM for the drain.
TEST(ServeSecurity, LaunchScriptPassesSighupToRankZero) {
  const Key a = keygen("a", "read"), b = keygen("b", "read");
  Files f;
  make_files(f, line_of(a) + line_of(b), "  auth:\n    keys_file: " + f.dir.file("keys") + "\n", false);
  const std::string log = f.dir.file("launch.log"), port_file = f.dir.file("port");
  const std::string cmd = "SHARDTOPK_BIN=" + std::string(SHARDTOPK_BIN) + " exec " + SHARDTOPK_SOURCE_DIR +
                          "/launch/serve.sh 2 -c " + f.config + " --set engine.backend=cpu --port-file " + port_file +
                          " >" + log + " 2>&1 </dev/null";
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  struct Cleanup {  // the launcher, and every process started with this test's config (mpirun, the ranks)
    pid_t pid;
    std::string config;
    ~Cleanup() {
      kill(-pid, SIGKILL);
      for (const auto& e : std::filesystem::directory_iterator("/proc")) {
        const std::string name = e.path().filename();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream in(e.path() / "cmdline");
        const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (cmdline.find(config) != std::string::npos) kill(std::stoi(name), SIGKILL);
      }
      waitpid(pid, nullptr, WNOHANG);
    }
  } cleanup{pid, f.config};
  int port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::ifstream(port_file) >> port;
    if (port == 0 || http(port, "GET", "/readyz", "").status != 200) {
      port = 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_GT(port, 0) << read_text(log);
  const std::string search = json_queries(f.q(0), 1, kDim, 3);
  EXPECT_EQ(http(port, "POST", "/v1/search", b.key, search).status, 200);
  write_text(f.keys, line_of(a));
  ASSERT_EQ(kill(pid, SIGHUP), 0);
  for (int i = 0; i < 200 && count_of(read_text(log), "reloaded: 1 key(s) in force") == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(http(port, "POST", "/v1/search", b.key, search).status, 401) << read_text(log);
  EXPECT_EQ(http(port, "POST", "/v1/search", a.key, search).status, 200) << "the job goes on after the SIGHUP";
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int st = 0;
  for (int i = 0; i < 300 && waitpid(pid, &st, WNOHANG) != pid; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << read_text(log);
}

// ------------------------------------------------------------------------------ keygen

TEST(ServeSecurity, Keygen) {
  Shell s = sh(std::string(SHARDTOPK_BIN) + " keygen --name loader-1 --role write --rate 20 --burst 40");
  ASSERT_EQ(s.rc, 0) << s.out;
  std::vector<std::string> lines;
  std::istringstream in(s.out);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u) << s.out;
  EXPECT_EQ(lines[0][0], '#');
  EXPECT_EQ(lines[2][0], '#');
  const std::string& key = lines[1];
  EXPECT_EQ(key.size(), 47u);
  EXPECT_EQ(lines[3], "loader-1 write " + service::to_hex(service::sha256(key.data(), key.size())) + " rate=20 burst=40");
  EXPECT_NE(keygen("a", "read").key, keygen("a", "read").key);
  s = sh(std::string(SHARDTOPK_BIN) + " keygen --name x --role superuser");
  EXPECT_EQ(s.rc, 1);
  EXPECT_THAT(s.out, HasSubstr("role 'superuser' unknown (allowed: read, write, admin)"));
  s = sh(std::string(SHARDTOPK_BIN) + " keygen --role read");
  EXPECT_EQ(s.rc, 2);
  EXPECT_THAT(s.out, HasSubstr("--name is required"));
}

}  // namespace
}  // namespace shardtopk::test
