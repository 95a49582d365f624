// docs/kubernetes/omnistage-distributed.yaml, the Kubernetes example of docs/distributed.md,
// checked against the parts of the Kubernetes object schema it uses (kinds and API versions,
// names, selectors that select the pod templates, containers, env, ports, the StatefulSet's
// service), against the launch it describes (the workers reach the head's master Service on its
// port), and with every container's `serve` arguments run through `omnistage config`, which
// parses and validates serve's flags. Where kubectl reaches a cluster, `kubectl apply
// --dry-run=client` must accept the file too.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/yaml.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace omni::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kManifest = fs::path(OMNISTAGE_SOURCE_DIR) / "docs" / "kubernetes" / "omnistage-distributed.yaml";

std::vector<Json> documents() {
  std::vector<Json> out;
  for (const YAML::Node& node : YAML::LoadAllFromFile(kManifest.string())) out.push_back(yaml_to_json(node));
  return out;
}

bool dns_label(const std::string& name) {
  return name.size() <= 63 && std::regex_match(name, std::regex("[a-z0-9]([-a-z0-9]*[a-z0-9])?"));
}

bool selects(const Json& selector, const Json& labels) {
  if (!selector.is_object() || selector.empty() || !labels.is_object()) return false;
  for (const auto& [key, value] : selector.items()) {
    if (!labels.contains(key) || labels[key] != value) return false;
  }
  return true;
}

// The value of `--flag=value` among `args`.
std::string flag(const Json& args, const std::string& name) {
  for (const Json& arg : args) {
    const std::string text = arg.get<std::string>();
    if (text.rfind(name + "=", 0) == 0) return text.substr(name.size() + 1);
  }
  return "";
}

void check_container(const Json& container, const std::string& where) {
  SCOPED_TRACE(where);
  ASSERT_TRUE(container.is_object());
  EXPECT_TRUE(dns_label(container.value("name", ""))) << container.dump();
  EXPECT_TRUE(container.contains("image") && container["image"].is_string()) << container.dump();
  ASSERT_TRUE(container.contains("args") && container["args"].is_array()) << container.dump();
  for (const Json& arg : container["args"]) EXPECT_TRUE(arg.is_string()) << arg.dump();
  for (const Json& env : container.value("env", Json::array())) {
    EXPECT_TRUE(env.contains("name") && env["name"].is_string()) << env.dump();
    EXPECT_NE(env.contains("value"), env.contains("valueFrom")) << "exactly one of value, valueFrom: " << env.dump();
  }
  for (const Json& port : container.value("ports", Json::array())) {
    ASSERT_TRUE(port.contains("containerPort") && port["containerPort"].is_number_integer()) << port.dump();
    EXPECT_GT(port["containerPort"].get<int>(), 0);
    EXPECT_LT(port["containerPort"].get<int>(), 65536);
  }
}

TEST(KubernetesManifestTest, ObjectsFollowTheKubernetesSchema) {
  const std::map<std::string, std::string> api_version = {
      {"Service", "v1"}, {"Deployment", "apps/v1"}, {"StatefulSet", "apps/v1"}};
  std::set<std::string> services;
  std::vector<Json> workloads;
  std::vector<Json> service_objects;
  for (const Json& object : documents()) {
    ASSERT_TRUE(object.is_object());
    const std::string kind = object.value("kind", "");
    SCOPED_TRACE(kind);
    ASSERT_TRUE(api_version.count(kind)) << "unexpected kind: " << object.dump();
    EXPECT_EQ(object.value("apiVersion", ""), api_version.at(kind));
    const std::string name = object["metadata"].value("name", "");
    EXPECT_TRUE(dns_label(name)) << name;
    const Json& spec = object.at("spec");
    if (kind == "Service") {
      services.insert(name);
      service_objects.push_back(object);
      ASSERT_TRUE(spec.at("ports").is_array());
      for (const Json& port : spec["ports"]) {
        EXPECT_TRUE(port.at("port").is_number_integer()) << port.dump();
        EXPECT_TRUE(dns_label(port.value("name", "x"))) << port.dump();
      }
      continue;
    }
    workloads.push_back(object);
    EXPECT_TRUE(spec.at("replicas").is_number_integer());
    const Json& labels = spec.at("template").at("metadata").at("labels");
    EXPECT_TRUE(selects(spec.at("selector").at("matchLabels"), labels)) << "the selector must select the pods";
    const Json& containers = spec["template"]["spec"].at("containers");
    ASSERT_TRUE(containers.is_array() && !containers.empty());
    for (const Json& container : containers) check_container(container, name);
  }
  for (const Json& service : service_objects) {
    bool selected = false;
    for (const Json& workload : workloads) {
      selected |= selects(service["spec"].at("selector"), workload["spec"]["template"]["metadata"]["labels"]);
    }
    EXPECT_TRUE(selected) << service["metadata"]["name"] << " selects no pod";
  }
  for (const Json& workload : workloads) {
    if (workload["kind"] == "StatefulSet") EXPECT_TRUE(services.count(workload["spec"].value("serviceName", "")));
  }
}

TEST(KubernetesManifestTest, WorkersReachTheHeadsMasterAndEveryServeCommandParses) {
  TempDir dir;
  const fs::path model = dir.path() / "qwen3_tts";
  ProcessResult made = run_process({OMNISTAGE_BINARY, "demo-model", "--arch", "qwen3_tts", "--out", model.string()});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  Json head_args, worker_args;
  std::map<std::string, int> service_ports;
  for (const Json& object : documents()) {
    if (object["kind"] == "Service") {
      service_ports[object["metadata"]["name"]] = object["spec"]["ports"][0]["port"].get<int>();
      continue;
    }
    const Json& args = object["spec"]["template"]["spec"]["containers"][0]["args"];
    (flag(args, "--stage-id") == "0" ? head_args : worker_args) = args;
    // The same flags on the demo checkpoint: `config` parses and validates them as serve does.
    std::vector<std::string> argv = {OMNISTAGE_BINARY, "config", model.string()};
    for (size_t i = 2; i < args.size(); ++i) argv.push_back(args[i].get<std::string>());
    ProcessResult checked = run_process(argv);
    EXPECT_EQ(checked.exit_code, 0) << object["metadata"]["name"] << ": " << checked.err;
    EXPECT_EQ(args[0], "serve");
  }
  ASSERT_FALSE(head_args.is_null());
  ASSERT_FALSE(worker_args.is_null());
  EXPECT_EQ(flag(head_args, "--omni-master-port"), flag(worker_args, "--omni-master-port"));
  EXPECT_EQ(head_args[1], worker_args[1]);  // the same model
  const std::string master = flag(worker_args, "--omni-master-address");
  ASSERT_TRUE(service_ports.count(master)) << master << " is not a Service of the manifest";
  EXPECT_EQ(std::to_string(service_ports[master]), flag(worker_args, "--omni-master-port"));
}

TEST(KubernetesManifestTest, KubectlDryRunAcceptsItWhereAClusterIsReachable) {
  if (!fs::exists("/usr/bin/kubectl")) GTEST_SKIP() << "kubectl is not installed";
  ProcessResult result =
      run_process({"/usr/bin/kubectl", "apply", "--dry-run=client", "--request-timeout=3s", "-f", kManifest.string()});
  if (result.exit_code != 0 &&
      (result.err.find("connection refused") != std::string::npos ||
       result.err.find("no such host") != std::string::npos || result.err.find("i/o timeout") != std::string::npos)) {
    GTEST_SKIP() << "kubectl reaches no cluster (it needs one even for a client dry run): " << result.err;
  }
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
}

}  // namespace
}  // namespace omni::testing
