// Deployment profiles (see vitdeploy/deployment.hpp): the same checks as vitdeploy/runtime/deploy/profiles.py.
#include "vitdeploy/deployment.hpp"

#include <fnmatch.h>
#include <sched.h>
#include <sys/utsname.h>
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <vector>

#include "vitdeploy/backend.hpp"
#include "vitdeploy/error.hpp"
#include "vitdeploy/json.hpp"
#include "vitdeploy/metadata.hpp"
#include "vitdeploy/onnxruntime_backend.hpp"
#include "vitdeploy/openvino_backend.hpp"
#include "vitdeploy/runtime_facts.hpp"
#include "vitdeploy/sha256.hpp"

namespace vitdeploy {
namespace {

constexpr const char* kProfileFormat = "vitdeploy-deployment-profile/1";
constexpr const char* kDecisionFormat = "vitdeploy-deployment-decision/1";

std::string trim(const std::string& s) {
    auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("cannot read '" + path + "'");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string lower(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// The model's SHA-256, and with an external data file '<name>.data' the SHA-256 of "<model digest> <data digest>"
// (vitdeploy.runtime.deploy.identity.model_digest), each file streamed.
std::string model_digest(const std::string& model_path) {
    std::string digest = sha256_file_hex(model_path);
    std::string data_path = model_path + ".data";
    std::error_code ec;
    if (std::filesystem::is_regular_file(data_path, ec)) {
        std::string joined = digest + " " + sha256_file_hex(data_path);
        digest = sha256_hex(joined.data(), joined.size());
    }
    return digest;
}

// Whether ``flag`` is among a fingerprint's comma-separated ``flags``.
bool has_flag(const std::string& flags, const std::string& flag) {
    return ("," + flags + ",").find("," + flag + ",") != std::string::npos;
}

bool has_any(const std::string& flags, const std::vector<std::string>& wanted) {
    return std::any_of(wanted.begin(), wanted.end(), [&](const std::string& f) { return has_flag(flags, f); });
}

[[maybe_unused]] bool has_all(const std::string& flags, const std::vector<std::string>& wanted) {
    return std::all_of(wanted.begin(), wanted.end(), [&](const std::string& f) { return has_flag(flags, f); });
}

[[maybe_unused]] std::string joined(const std::vector<std::string>& items, const char* sep) {
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : sep) + item;
    return out;
}

const Json* member(const Json& object, const char* key) { return object.is_object() ? object.find(key) : nullptr; }

// Why a deployment's precision policy cannot run on a CPU with ``flags`` ("" where it can): "file" runs anywhere, a
// reduced policy (bf16, fp16) where the CPU has one of its units; any other name is not a policy.
std::string policy_gap(const std::string& policy, const std::string& flags) {
    if (policy == "file") return "";
    const PolicyFacts* facts = runtime_facts().policy(policy);
    if (!facts) return "'" + policy + "' is not a precision policy";
    return has_any(flags, facts->units) ? "" : "it runs " + upper(policy) + ", and this CPU has no " + upper(policy) + " units";
}

// What OpenVINO's CPU plugin is asked for under a policy: f32 for the file's own math.
std::string openvino_precision(const std::string& policy) {
    const PolicyFacts* facts = runtime_facts().policy(policy);
    return facts ? facts->openvino_precision : "f32";
}

std::string string_member(const Json& object, const char* key) {
    const Json* v = member(object, key);
    return v && v->is_string() ? v->as_string() : std::string();
}

// Which other machine a profile's or a cached decision's "machine" describes ("another CPU ('...')", "another core
// count ..."), the first difference from this one; empty: this machine (as Python's profile_problems compares).
std::string other_machine(const Json& machine, const MachineFingerprint& here) {
    std::string flags;
    if (const Json* f = member(machine, "flags"); f && f->is_array())
        for (const auto& v : f->as_array()) flags += (flags.empty() ? "" : ",") + (v.is_string() ? v.as_string() : "?");
    const Json* cores = member(machine, "cores");
    if (string_member(machine, "cpu") != here.cpu) return "another CPU ('" + string_member(machine, "cpu") + "')";
    if (string_member(machine, "family_model") != here.family_model) return "another CPU family/model";
    if (flags != here.flags) return "another CPU flags (" + flags + "; here " + here.flags + ")";
    if (!cores || !cores->is_number() || cores->as_number() != here.cores)
        return "another core count (here " + std::to_string(here.cores) + ")";
    return "";
}

// OpenVINO's build number ("2026.4.1-22982-e213a14...") begins with the release Python records ("2026.4.1").
std::string openvino_release(const std::string& openvino_version) {
    return openvino_version.substr(0, openvino_version.find('-'));
}

// What 'vitdeploy tune' would not have written, as Python's read_profile and Deployment.from_dict refuse it
// (vitdeploy/runtime/deploy/profiles.py): the types of the profile's parts, the chosen deployment's threads,
// settings and precision, and the chosen deployment among the profile's own passing candidates. Empty: none.
std::string schema_problem(const Json& doc, const Json& chosen, const MachineFingerprint& here) {
    for (const char* key : {"machine", "runtime_versions"})
        if (const Json* part = member(doc, key); !part || !part->is_object()) return std::string("its '") + key + "' is not an object";
    const Json* sha = member(doc, "model_sha256");
    if (!sha || !sha->is_string()) return "its 'model_sha256' is not a string";
    if (const Json* t = member(chosen, "threads"); t && !t->is_null()) {
        if (!t->is_number() || t->as_number() != static_cast<double>(static_cast<long long>(t->as_number())) ||
            t->as_number() < 1 || t->as_number() > here.cores)
            return "it chooses threads " + t->dump() + ", not a whole number from 1 to this machine's " +
                   std::to_string(here.cores) + " cores";
    }
    if (const Json* settings = member(chosen, "settings"); settings && !settings->is_null()) {
        if (!settings->is_object()) return "its chosen settings are not an object";
        for (std::size_t i = 0; i < settings->keys().size(); ++i) {
            const std::string& key = settings->keys()[i];
            if (!listed(runtime_facts().profile_settings, key)) return key + " is not a setting 'vitdeploy tune' writes";
            if (!settings->values()[i].is_bool()) return key + " is " + settings->values()[i].dump() + ", expected true or false";
        }
    }
    const std::string runtime = string_member(chosen, "runtime"), precision = string_member(chosen, "precision");
    if (runtime_facts().policy(precision) && !runtime_facts().takes(runtime, precision))
        return runtime + " does not take precision " + precision;
    if (const std::string gap = policy_gap(precision, here.flags); !gap.empty()) return gap;
    const Json* candidates = member(doc, "candidates");
    if (!candidates || candidates->is_null()) return "";
    if (!candidates->is_array()) return "its 'candidates' is not a list";
    bool chosen_passed = false;
    for (const Json& candidate : candidates->as_array()) {
        const Json* deployment = member(candidate, "deployment");
        if (!deployment || !deployment->is_object()) return "it has a candidate without its deployment";
        const Json* passed = member(candidate, "passed");
        bool same = true;  // runtime, policy, settings and threads, as Python's _same_choice
        for (const char* key : {"runtime", "precision", "settings", "threads"}) {
            const Json* a = member(chosen, key);
            const Json* b = member(*deployment, key);
            same = same && ((a ? a->dump() : "null") == (b ? b->dump() : "null"));
        }
        chosen_passed = chosen_passed || (same && passed && passed->is_bool() && passed->as_bool());
    }
    if (!candidates->as_array().empty() && !chosen_passed)
        return "it chooses a deployment that is not one of its passing candidates";
    return "";
}

}  // namespace

MachineFingerprint machine_fingerprint() {
    MachineFingerprint fp;
    struct utsname names {};
    fp.machine = uname(&names) == 0 ? names.machine : "unknown";
    std::ifstream in("/proc/cpuinfo");
    std::string line, family, model_number, flags_text, flags_key;
    while (std::getline(in, line)) {
        auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string key = lower(trim(line.substr(0, colon))), value = trim(line.substr(colon + 1));
        if (value.empty()) continue;
        if ((key == "model name" || key == "hardware" || key == "cpu model") && fp.cpu.empty()) fp.cpu = value;
        if (key == "cpu family" && family.empty()) family = value;
        if (key == "model" && model_number.empty()) model_number = value;
        if ((key == "flags" || key == "features") && flags_text.empty()) {
            flags_text = value;
            flags_key = key;
        }
    }
    auto digits = [](const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; };
    if (digits(family) && digits(model_number)) fp.family_model = "family " + family + " model " + model_number;
    std::set<std::string> present;
    std::istringstream words(flags_text);
    for (std::string w; words >> w;) present.insert(w);
#if defined(__aarch64__)
    // As vitdeploy.cpu_features: an arm64 CPU's features come from the auxiliary vector, which the kernel (or
    // qemu-user, for the CPU it emulates) fills; under qemu-user /proc/cpuinfo is the x86 host's ('flags', not
    // 'Features'), and its model and flags are not this CPU's.
    if (flags_key == "flags") {
        fp.cpu = "emulated " + fp.machine + " on " + (fp.cpu.empty() ? std::string("an x86 host") : fp.cpu);
        fp.family_model.clear();
        present.clear();
    }
    const unsigned long hwcap[2] = {getauxval(AT_HWCAP), getauxval(AT_HWCAP2)};
    const std::vector<std::string>* bit_names[2] = {&runtime_facts().arm64_hwcap, &runtime_facts().arm64_hwcap2};
    if (hwcap[0] || hwcap[1]) present.clear();
    for (int w = 0; w < 2; ++w)
        for (std::size_t bit = 0; bit < bit_names[w]->size() && bit < 64; ++bit)
            if (hwcap[w] >> bit & 1UL) present.insert((*bit_names[w])[bit]);
#else
    (void)flags_key;
#endif
    if (fp.cpu.empty()) fp.cpu = fp.machine;
    std::vector<std::string> mask;  // VITDEPLOY_CPU_MASK: comma-separated patterns, '*' wildcards
    if (const char* env = std::getenv("VITDEPLOY_CPU_MASK")) {
        std::stringstream ss(env);
        for (std::string p; std::getline(ss, p, ',');)
            if (!trim(p).empty()) mask.push_back(lower(trim(p)));
    }
    for (const std::string& flag : runtime_facts().reported_flags) {  // vitdeploy/data/runtime_facts.json, in its order
        if (!present.count(flag)) continue;
        bool hidden = false;
        for (const auto& p : mask) hidden = hidden || fnmatch(p.c_str(), flag.c_str(), 0) == 0;
        if (!hidden) fp.flags += (fp.flags.empty() ? "" : ",") + flag;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    fp.cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    return fp;
}

std::string deployment_profile_path(const std::string& model_path) {
    std::filesystem::path p(model_path);
    return (p.parent_path() / (p.stem().string() + ".profile.json")).string();
}

std::string user_cache_dir(const std::string& kind) {
    namespace fs = std::filesystem;
    fs::path base;
    if (const char* asked = std::getenv("VITDEPLOY_CACHE_DIR")) {
        const std::string word = lower(trim(asked));
        if (word.empty() || word == "none" || word == "off" || word == "0") return "";
        base = asked;
    } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
        base = fs::path(xdg) / "vitdeploy";
    } else if (const char* home = std::getenv("HOME"); home && *home) {
        base = fs::path(home) / ".cache" / "vitdeploy";
    } else {
        return "";
    }
    const fs::path folder = base / kind;
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec || ::access(folder.c_str(), W_OK) != 0) return "";
    return folder.string();
}

bool u8s8_saturates() {
#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
    const std::string flags = machine_fingerprint().flags;
    return !has_any(flags, runtime_facts().int8_dot_flags);  // x86 without VNNI/AMX, or flags unknown: the safe side, as the Python runtime
#else
    return false;
#endif
}

bool keep_gelu_apart(const std::string& file_precision) {
#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
    const std::string flags = machine_fingerprint().flags;
    const auto& facts = runtime_facts();
    return has_all(flags, facts.gelu_apart.flags) && !has_any(flags, facts.gelu_apart.without) &&
           listed(facts.gelu_apart.file_precisions, file_precision);
#else
    (void)file_precision;
    return false;
#endif
}

DeploymentProfile read_deployment_profile(const std::string& model_path, const std::string& ort_version,
                                          const std::string& openvino_version) {
    DeploymentProfile out;
    out.path = deployment_profile_path(model_path);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(out.path, ec)) return out;
    out.found = true;
    std::string name = std::filesystem::path(out.path).filename().string();
    Json doc;
    try {
        doc = Json::parse(read_file(out.path), out.path);
    } catch (const Error& e) {
        out.note = name + " ignored: it is not readable JSON (run 'vitdeploy tune' again)";
        return out;
    }
    const Json* chosen = member(doc, "chosen");
    const Json* machine = member(doc, "machine");
    const Json* versions = member(doc, "runtime_versions");
    if (string_member(doc, "format") != kProfileFormat || !chosen || !chosen->is_object() || !machine || !versions) {
        out.note = name + " ignored: it is not a vitdeploy deployment profile (" + kProfileFormat + ")";
        return out;
    }
    MachineFingerprint here = machine_fingerprint();
    if (std::string problem = schema_problem(doc, *chosen, here); !problem.empty()) {
        out.note = name + " ignored: " + problem + " (run 'vitdeploy tune' again)";
        return out;
    }
    out.runtime = string_member(*chosen, "runtime");
    out.precision = string_member(*chosen, "precision");
    if (const Json* t = member(*chosen, "threads"); t && t->is_number()) out.threads = static_cast<int>(t->as_integer());
    if (const Json* settings = member(*chosen, "settings"))
        if (const Json* g = member(*settings, "gelu_apart"); g && g->is_bool()) out.gelu_apart = g->as_bool() ? 1 : 0;
    std::vector<std::string> problems;  // machine and runtime first: the model is hashed only when they fit
    if (std::string other = other_machine(*machine, here); !other.empty()) problems.push_back("it was tuned on " + other);
    if (out.runtime == "onnxruntime" && string_member(*versions, "onnxruntime") != ort_version)
        problems.push_back("it was tuned with onnxruntime " + string_member(*versions, "onnxruntime") + ", here " + ort_version);
    const std::string ov_release = openvino_release(openvino_version);
    if (out.runtime == "openvino" && !openvino_version.empty() && string_member(*versions, "openvino") != ov_release)
        problems.push_back("it was tuned with openvino " + string_member(*versions, "openvino") + ", here " + ov_release);
    if (problems.empty()) {
        try {
            if (string_member(doc, "model_sha256") != model_digest(model_path))
                problems.push_back("it was tuned for another file (its SHA-256 differs)");
        } catch (const Error& e) {
            problems.push_back(e.what());
        }
    }
    if (!problems.empty()) {
        out.note = name + " ignored: " + problems.front();
        return out;
    }
    const bool runs = out.runtime == "onnxruntime" || (out.runtime == "openvino" && !openvino_version.empty());
    if (!runs || !runtime_facts().takes(out.runtime, out.precision)) {
        out.note = name + " chose " + out.runtime + " " + out.precision + ", which this build of the C++ library does not run" +
                   (out.runtime == "openvino" ? " (built without OpenVINO)" : "") + ": the file runs as written on ONNX Runtime";
        return out;
    }
    out.used = true;
    out.note = name + ": " + out.runtime + " " + out.precision + ", " + (out.threads ? std::to_string(out.threads) : "default") + " thread(s)";
    return out;
}

namespace {

// The digest of a file's vitdeploy.* metadata entries as written, without the weights' provenance: "key=value" lines
// in key order, joined by newlines (vitdeploy.runtime.deploy.identity.props_digest computes the same).
std::string props_digest(const std::string& model_path) {
    static const std::set<std::string> provenance = {"vitdeploy.checkpoint", "vitdeploy.checkpoint_sha256",
                                                     "vitdeploy.random_seed", "vitdeploy.random_weights"};
    std::vector<std::pair<std::string, std::string>> props;
    for (auto& kv : read_onnx_metadata_props(model_path))
        if (kv.first.rfind("vitdeploy.", 0) == 0 && !provenance.count(kv.first)) props.push_back(kv);
    std::sort(props.begin(), props.end());
    std::string text;
    for (std::size_t i = 0; i < props.size(); ++i) text += (i ? "\n" : "") + props[i].first + "=" + props[i].second;
    return sha256_hex(text.data(), text.size());
}

std::uintmax_t file_bytes(const std::string& model_path) {
    std::error_code ec;
    std::uintmax_t size = std::filesystem::file_size(model_path, ec);
    if (ec) return 0;
    if (std::filesystem::is_regular_file(model_path + ".data", ec)) size += std::filesystem::file_size(model_path + ".data", ec);
    return size;
}

}  // namespace

DeploymentProfile read_cached_decision(const std::string& model_path, int threads, const std::string& ort_version,
                                       const std::string& openvino_version) {
    DeploymentProfile out;
    const std::string folder = user_cache_dir("decisions");
    std::error_code ec;
    if (folder.empty() || !std::filesystem::is_directory(folder, ec)) return out;
    const MachineFingerprint here = machine_fingerprint();
    const int want_threads = threads > 0 ? threads : here.cores;
    std::string digest;
    std::uintmax_t bytes = 0;
    try {
        digest = props_digest(model_path);
        bytes = file_bytes(model_path);
    } catch (const Error&) {
        return out;  // not an ONNX file: the backend says so when it opens it
    }
    const std::string ov_release = openvino_release(openvino_version);
    for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
        if (entry.path().extension() != ".json") continue;
        Json doc;
        try {
            doc = Json::parse(read_file(entry.path().string()), entry.path().string());
        } catch (const Error&) {
            continue;  // damaged: Python probes again and rewrites it
        }
        const Json* key = member(doc, "key");
        const Json* chosen = member(doc, "chosen");
        if (string_member(doc, "format") != kDecisionFormat || !key || !chosen || !chosen->is_object()) continue;
        const Json* machine = member(*key, "machine");
        const Json* versions = member(*key, "runtime_versions");
        const Json* file = member(*key, "file");
        const Json* key_threads = member(*key, "threads");
        if (!machine || !versions || !file || !key_threads || !key_threads->is_number()) continue;
        const Json* size = member(*file, "bytes");
        if (string_member(*file, "props_sha256") != digest || !size || !size->is_number() ||
            static_cast<std::uintmax_t>(size->as_number()) != bytes || !other_machine(*machine, here).empty() ||
            string_member(*machine, "machine") != here.machine || key_threads->as_number() != want_threads ||
            string_member(*versions, "onnxruntime") != ort_version)
            continue;
        if (!ov_release.empty() && member(*versions, "openvino") && string_member(*versions, "openvino") != ov_release)
            continue;  // decided with another OpenVINO than this build's
        out.found = true;
        out.path = entry.path().string();
        out.runtime = string_member(*chosen, "runtime");
        out.precision = string_member(*chosen, "precision");
        if (const Json* t = member(*chosen, "threads"); t && t->is_number()) out.threads = static_cast<int>(t->as_integer());
        if (const Json* settings = member(*chosen, "settings"))
            if (const Json* g = member(*settings, "gelu_apart"); g && g->is_bool()) out.gelu_apart = g->as_bool() ? 1 : 0;
        const std::string name = entry.path().filename().string();
        const bool runs = out.runtime == "onnxruntime" || (out.runtime == "openvino" && !openvino_version.empty());
        if (!runs || !runtime_facts().takes(out.runtime, out.precision) || !policy_gap(out.precision, here.flags).empty() ||
            out.threads < 0 || out.threads > here.cores) {
            out.note = "the probe's decision " + name + " chose " + out.runtime + " " + out.precision +
                       ", which this build of the C++ library does not run" +
                       (out.runtime == "openvino" && openvino_version.empty() ? " (built without OpenVINO)" : "");
            return out;
        }
        out.used = true;
        out.note = std::filesystem::path(model_path).filename().string() + " runs as " + out.runtime + " " +
                   out.precision + ", " + std::to_string(out.threads ? out.threads : want_threads) +
                   " thread(s): the probe's decision for this machine (" + out.path + ", " + string_member(doc, "created") + ")";
        return out;
    }
    return out;
}

CpuDefault cpu_default(const Metadata& metadata) {
    CpuDefault out;
    const std::vector<std::string> runs = cpu_runtimes_for(metadata);  // the runtimes whose CPU runs the file
    auto runs_it = [&runs](const std::string& name) { return std::find(runs.begin(), runs.end(), name) != runs.end(); };
#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
    if (metadata.get_string_or("precision", "fp32") == "fp32") {  // the rows were measured on FP32 files
        const std::string flags = machine_fingerprint().flags;
        const std::string family = metadata.get_string_or("family", "");
        for (const CpuDefaultRow& row : runtime_facts().cpu_defaults) {  // vitdeploy/data/runtime_facts.json
            if (!has_all(flags, row.flags) || has_any(flags, row.without) || !listed(row.measured_on, family)) continue;
            if (!runs_it(row.runtime)) break;  // e.g. a fused-kernel file: it stays as written, as in Python
            out.runtime = row.runtime;
            out.precision = row.precision;
            out.describe = joined(row.flags, "+") + (row.without.empty() ? "" : " without " + joined(row.without, "/")) +
                           ": " + row.runtime + " " + row.precision;
            return out;
        }
    }
#endif
    if (runs_it("onnxruntime") || runs.empty()) return out;
    // ONNX Runtime's CPU cannot run it (a BF16 file): the first runtime that can, as Python's cpu_default
    out.runtime = runs.front();
    out.describe = "the file " + cpu_gap("onnxruntime", metadata);
    return out;
}

std::string apply_deployment_profile(const std::string& model_path, BackendOptions& options) {
    std::string ort_version, openvino_version;
#ifdef VITDEPLOY_WITH_ONNXRUNTIME
    ort_version = OnnxRuntimeBackend::runtime_version();
#endif
#ifdef VITDEPLOY_WITH_OPENVINO
    openvino_version = OpenVinoBackend::runtime_version();
#endif
    DeploymentProfile profile = read_deployment_profile(model_path, ort_version, openvino_version);
    Metadata metadata;
    try {
        metadata = Metadata::from_onnx_file(model_path);
    } catch (const Error&) {
        return profile.note;  // not an ONNX file: the backend says so when it opens it
    }
    const std::string precision = metadata.get_string_or("precision", "fp32");
    if (profile.used && profile.runtime == "openvino" && precision == "int8" && u8s8_saturates())
        return profile.note + "; but on this CPU (no VNNI/AMX) OpenVINO's INT8 needs the 7-bit weight rewrite only the "
               "Python runtime does: the file runs as written on ONNX Runtime";
    if (profile.used) {
        options.runtime = profile.runtime;
        options.inference_precision = openvino_precision(profile.precision);
        if (options.threads == 0 && profile.threads > 0) options.threads = profile.threads;
        if (profile.runtime == "openvino" && profile.gelu_apart >= 0) options.gelu_apart = profile.gelu_apart;
        return profile.note;
    }
    std::string note = profile.note.empty() ? "" : profile.note + "; ";
    const DeploymentProfile decided = read_cached_decision(model_path, options.threads, ort_version, openvino_version);
    if (decided.used) {
        options.runtime = decided.runtime;
        options.inference_precision = openvino_precision(decided.precision);
        if (options.threads == 0 && decided.threads > 0) options.threads = decided.threads;
        if (decided.runtime == "openvino" && decided.gelu_apart >= 0) options.gelu_apart = decided.gelu_apart;
        return note + decided.note;
    }
    if (!decided.note.empty()) note += decided.note + "; ";
    const CpuDefault chosen = cpu_default(metadata);
    if (chosen.describe.empty()) return note.empty() ? profile.note : note.substr(0, note.size() - 2);
    std::string name = std::filesystem::path(model_path).filename().string();
    if (chosen.runtime == "openvino" && openvino_version.empty())
        return note + name + " runs as written on onnxruntime: this CPU's default (" + chosen.describe +
               ") needs OpenVINO, which this build lacks (pip install openvino, rebuild)";
    options.runtime = chosen.runtime;
    // A BF16 file's own math: BF16 where the CPU has BF16 units, else f32 on its BF16 weights (the Python runner's rule).
    bool bf16_file_here = false;
    if (precision == "bf16") {
        const std::string flags = machine_fingerprint().flags;
        bf16_file_here = has_any(flags, runtime_facts().policy("bf16")->units);
    }
    options.inference_precision = chosen.precision == "bf16" || bf16_file_here ? "bf16" : "f32";
    return note + name + " runs as " + chosen.runtime + " " + chosen.precision + ": this CPU's default (" + chosen.describe + ")";
}

}  // namespace vitdeploy
