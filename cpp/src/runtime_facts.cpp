#include "vitdeploy/runtime_facts.hpp"

#include "vitdeploy/error.hpp"
#include "vitdeploy/json.hpp"

namespace vitdeploy {

namespace {

#include "runtime_facts.inc"

constexpr const char* kFormat = "vitdeploy-runtime-facts/1";

const Json& at(const Json& object, const char* key) {
    const Json* value = object.find(key);
    if (!value) throw MetadataError(std::string("runtime_facts.json has no '") + key + "': the library was built from a damaged file");
    return *value;
}

std::vector<std::string> strings(const Json& array) {
    std::vector<std::string> out;
    for (const Json& item : array.as_array()) out.push_back(item.as_string());
    return out;
}

RuntimeFacts parse() {
    const Json doc = Json::parse(kRuntimeFactsJson, "runtime_facts.json");
    if (at(doc, "format").as_string() != kFormat)
        throw MetadataError("runtime_facts.json is not " + std::string(kFormat) + ": the library was built from another file");
    RuntimeFacts facts;
    const Json& flags = at(doc, "cpu_flags");
    facts.reported_flags = strings(at(flags, "reported"));
    facts.int8_dot_flags = strings(at(flags, "int8_dot"));
    facts.arm64_hwcap = strings(at(flags, "arm64_hwcap"));
    facts.arm64_hwcap2 = strings(at(flags, "arm64_hwcap2"));
    for (const Json& row : at(doc, "cpu_runtimes").as_array())
        facts.cpu_runtimes.push_back({at(row, "name").as_string(), at(row, "title").as_string(),
                                      strings(at(row, "precisions")), strings(at(row, "custom_ops")),
                                      strings(at(row, "policies"))});
    for (const Json& row : at(doc, "cpu_defaults").as_array()) {
        const Json* without = row.find("without");
        facts.cpu_defaults.push_back({strings(at(row, "flags")), without ? strings(*without) : std::vector<std::string>{},
                                      at(row, "runtime").as_string(), at(row, "precision").as_string(),
                                      strings(at(row, "measured_on"))});
    }
    const Json& gelu = at(doc, "openvino_gelu_apart");
    facts.gelu_apart = {strings(at(gelu, "flags")), strings(at(gelu, "without")), strings(at(gelu, "file_precisions"))};
    const Json& policies = at(doc, "proven_policies");
    for (std::size_t i = 0; i < policies.keys().size(); ++i) {
        const Json& row = policies.values()[i];
        facts.policies.push_back({policies.keys()[i], strings(at(row, "units")), at(row, "openvino_precision").as_string()});
    }
    facts.profile_settings = strings(at(doc, "profile_settings"));
    const Json& parts = at(doc, "model_parts");
    for (std::size_t i = 0; i < parts.keys().size(); ++i) {
        const std::vector<Json>& pair = parts.values()[i].as_array();
        if (pair.size() != 2) throw MetadataError("runtime_facts.json: model_parts." + parts.keys()[i] + " is not [model, part]");
        facts.model_parts.push_back({parts.keys()[i], {pair[0].as_string(), pair[1].as_string()}});
    }
    return facts;
}

}  // namespace

std::pair<std::string, std::string> RuntimeFacts::model_part(const std::string& family) const {
    for (const auto& [name, pair] : model_parts)
        if (name == family) return pair;
    return {"", ""};
}

bool RuntimeFacts::takes(const std::string& runtime, const std::string& policy) const {
    for (const CpuRuntimeFacts& r : cpu_runtimes)
        if (r.name == runtime) return listed(r.policies, policy);
    return false;
}

const PolicyFacts* RuntimeFacts::policy(const std::string& name) const {
    for (const PolicyFacts& p : policies)
        if (p.name == name) return &p;
    return nullptr;
}

const RuntimeFacts& runtime_facts() {
    static const RuntimeFacts facts = parse();
    return facts;
}

const char* runtime_facts_json() { return kRuntimeFactsJson; }

}  // namespace vitdeploy
