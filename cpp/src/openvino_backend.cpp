// OpenVINO backend through its C++ API (openvino/openvino.hpp); see vitdeploy/openvino_backend.hpp.
#include "vitdeploy/openvino_backend.hpp"

#include <openvino/op/constant.hpp>
#include <openvino/op/reshape.hpp>
#include <openvino/op/transpose.hpp>
#include <openvino/openvino.hpp>

#include <filesystem>
#include <set>
#include <sstream>
#include <utility>

#include "vitdeploy/deployment.hpp"
#include "vitdeploy/error.hpp"

namespace vitdeploy {

namespace {

ElementType from_openvino(const ov::element::Type& t) {
    if (t == ov::element::f32) return ElementType::Float32;
    if (t == ov::element::f16) return ElementType::Float16;
    if (t == ov::element::bf16) return ElementType::BFloat16;
    if (t == ov::element::i64) return ElementType::Int64;
    if (t == ov::element::i32) return ElementType::Int32;
    if (t == ov::element::i8) return ElementType::Int8;
    if (t == ov::element::u8) return ElementType::UInt8;
    if (t == ov::element::boolean) return ElementType::Bool;
    return ElementType::Unsupported;
}

// OpenVINO's messages are a stack of "Exception from src/...cpp:N:" lines around the one that says what failed
// (vitdeploy.runtime.backends.openvino_runner._openvino_reason).
std::string reason(const std::string& text) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        auto b = line.find_first_not_of(" \t[]");
        if (b != std::string::npos && line.compare(b, 14, "Exception from") != 0) return line.substr(b, 300);
    }
    return text.substr(0, 300);
}

// The output's ONNX name: OpenVINO gives a port every name its tensor had, and get_any_name may return an internal
// one; the names the file's metadata declares win (as the Python runner's _port_name).
std::string port_name(const ov::Output<const ov::Node>& port, const std::set<std::string>& declared) {
    std::string best;  // the smallest declared name (get_names() is unordered), as Python's sorted()
    for (const auto& n : port.get_names())
        if (declared.count(n) && (best.empty() || n < best)) best = n;
    return best.empty() ? port.get_any_name() : best;
}

// The form of vitdeploy.runtime.forms.openvino_gelu.gelu_apart_from_gemms: the scalar x / sqrt(2) of each GELU fed by a
// GEMM (MatMul, or MatMul + bias Add) becomes the same value per channel, which OpenVINO's GELU fusion does not match
// (seen with 2026.4.1; a Python test fails when a version fuses it again), so the chain stays apart and the GEMM keeps
// MLAS, which takes no post-op. Rewrites only when `rewrite`; returns how many GELUs fed by a GEMM run apart: those
// rewritten and those the file already holds apart ('vitdeploy optimize --runtime openvino').
int gelu_apart_from_gemms(ov::Model& model, bool rewrite) {
    auto fed_by_gemm = [](const std::shared_ptr<ov::Node>& node) {
        const std::string kind = node->get_type_name();
        if (kind == "MatMul") return true;
        if (kind != "Add") return false;
        bool matmul = false, constant = false;
        for (const auto& input : node->input_values()) {
            const std::string k = input.get_node()->get_type_name();
            matmul = matmul || k == "MatMul";
            constant = constant || k == "Constant";
        }
        return matmul && constant;
    };
    int count = 0, changed = 0;
    for (const auto& erf : model.get_ordered_ops()) {
        if (std::string(erf->get_type_name()) != "Erf") continue;
        const std::shared_ptr<ov::Node> scale = erf->input_value(0).get_node_shared_ptr();
        const std::string kind = scale->get_type_name();
        if (kind != "Divide" && kind != "Multiply") continue;
        auto constant = std::dynamic_pointer_cast<ov::op::v0::Constant>(scale->input_value(1).get_node_shared_ptr());
        const ov::Output<ov::Node> source = scale->input_value(0);
        if (!constant || !fed_by_gemm(source.get_node_shared_ptr())) continue;
        const ov::PartialShape shape = source.get_partial_shape();
        if (shape.rank().is_dynamic() || shape.rank().get_length() == 0 || shape[shape.rank().get_length() - 1].is_dynamic())
            continue;
        const auto channels = static_cast<std::size_t>(shape[shape.rank().get_length() - 1].get_length());
        const std::size_t size = ov::shape_size(constant->get_shape());
        if (size > 1 && size == channels) {  // apart as the file holds it
            ++count;
        } else if (size == 1 && rewrite) {
            const float value = constant->cast_vector<float>().at(0);
            auto per_channel = ov::op::v0::Constant::create(constant->get_element_type(), ov::Shape{channels},
                                                            std::vector<float>(channels, value));
            scale->input(1).replace_source_output(per_channel->output(0));
            ++count;
            ++changed;
        }
    }
    if (changed) model.validate_nodes_and_infer_types();
    return count;
}

// The form of vitdeploy.runtime.forms.openvino_heads.heads_in_5d: each Transpose(0, 2, 1, 3) of a rank-4 tensor
// whose axes 1 and 2 may be equal (equal, or either not static) becomes Reshape(0, 0, 0, 0, 1) -> Transpose(0, 2, 1, 3,
// 4) -> Reshape(0, 0, 0, 0): OpenVINO 2026.4.1's fused attention computed a wrong result from the 4-D one where the
// tokens equal the heads (that module says what was measured). The same values move; returns how many were rewritten.
int write_heads_in_5d(ov::Model& model) {
    int changed = 0;
    for (const auto& node : model.get_ordered_ops()) {
        if (std::string(node->get_type_name()) != "Transpose") continue;
        auto order = std::dynamic_pointer_cast<ov::op::v0::Constant>(node->input_value(1).get_node_shared_ptr());
        if (!order || order->cast_vector<std::int64_t>() != std::vector<std::int64_t>{0, 2, 1, 3}) continue;
        const ov::Output<ov::Node> source = node->input_value(0);
        const ov::PartialShape shape = source.get_partial_shape();
        if (shape.rank().is_dynamic() || shape.rank().get_length() != 4) continue;
        if (shape[1].is_static() && shape[2].is_static() && shape[1].get_length() != shape[2].get_length()) continue;
        auto i64 = [](std::vector<std::int64_t> values) {
            return ov::op::v0::Constant::create(ov::element::i64, ov::Shape{values.size()}, values);
        };
        auto five = std::make_shared<ov::op::v1::Reshape>(source, i64({0, 0, 0, 0, 1}), true);
        auto moved = std::make_shared<ov::op::v1::Transpose>(five, i64({0, 2, 1, 3, 4}));
        auto four = std::make_shared<ov::op::v1::Reshape>(moved, i64({0, 0, 0, 0}), true);
        const auto names = node->output(0).get_names();
        for (auto target : node->output(0).get_target_inputs()) target.replace_source_output(four->output(0));
        node->output(0).set_names({});
        four->output(0).add_names(names);  // a model output keeps its name
        ++changed;
    }
    if (changed) model.validate_nodes_and_infer_types();
    return changed;
}

TensorInfo describe(const ov::Output<const ov::Node>& port, std::string name) {
    TensorInfo info;
    info.name = std::move(name);
    info.type = from_openvino(port.get_element_type());
    for (const auto& d : port.get_partial_shape()) info.shape.push_back(d.is_static() ? d.get_length() : -1);
    return info;
}

}  // namespace

std::string OpenVinoBackend::compile_cache_folder(const std::string& inference_precision) {
    // The folder the Python runner gives OpenVINO, named by the release ("2026.4.1") as Python names it, so a model
    // compiled by either is loaded by the other; one per inference precision, because OpenVINO's CPU plugin does not
    // key a blob by its precision hint (an f16 compile loaded an f32 one's blob: vitdeploy/runtime/backends/
    // openvino_runner.py says what was measured).
    const std::string build = runtime_version();
    return user_cache_dir("openvino/" + build.substr(0, build.find('-')) + "/" + inference_precision);
}

struct OpenVinoBackend::Impl {
    ov::Core core;
    ov::CompiledModel compiled;
    ov::InferRequest request;
};

std::string OpenVinoBackend::runtime_version() {
    const ov::Version version = ov::get_openvino_version();
    return version.buildNumber ? version.buildNumber : "unknown";
}

OpenVinoBackend::OpenVinoBackend(const std::string& path, const BackendOptions& options) : OpenedFile(path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw InputError("ONNX file '" + path + "' not found: run 'vitdeploy export' first or check the path");
    const std::string precision = options.inference_precision.empty() ? "f32" : options.inference_precision;
    if (precision != "f32" && precision != "bf16" && precision != "f16")
        throw InputError("OpenVINO inference precision '" + precision + "' is not one of f32, bf16, f16");
    Metadata file_metadata;
    try {
        file_metadata = Metadata::from_onnx_file(path);
    } catch (const InputError& e) {
        throw BackendError("OpenVINO cannot load '" + path + "' (" + e.what() + ")");
    }
    if (const std::string refusal = cpu_refusal("openvino", file_metadata, path); !refusal.empty()) throw InputError(refusal);
    if (file_metadata.get_string_or("precision", "") == "int8" && u8s8_saturates())
        throw InputError("'" + path + "' is an INT8 file and this CPU has no VNNI/AMX, where OpenVINO's u8 x s8 kernels "
                         "saturate; the Python runtime re-quantizes its weights to 7 bits at load, the C++ library does "
                         "not: run it on ONNX Runtime");
    impl_ = std::make_unique<Impl>();
    ov::AnyMap config{ov::hint::performance_mode(ov::hint::PerformanceMode::LATENCY),
                      ov::hint::inference_precision(precision == "f32"    ? ov::element::f32
                                                    : precision == "bf16" ? ov::element::bf16
                                                                          : ov::element::f16)};
    if (options.threads > 0) {
        config.emplace(ov::inference_num_threads(options.threads));
        // Pinning puts the plugin's threads on the first cores: two processes of fewer threads would share them.
        if (options.threads < machine_fingerprint().cores) config.emplace(ov::hint::enable_cpu_pinning(false));
    }
    compile_cache_ = compile_cache_folder(precision);
    try {
        if (!compile_cache_.empty()) impl_->core.set_property(ov::cache_dir(compile_cache_));  // OpenVINO's model cache
        std::shared_ptr<ov::Model> model = impl_->core.read_model(path);
        const bool apart = options.gelu_apart < 0 ? keep_gelu_apart(file_metadata.get_string_or("precision", "fp32"))
                                                  : options.gelu_apart == 1;
        gelus_apart_ = gelu_apart_from_gemms(*model, apart);
        heads_in_5d_ = write_heads_in_5d(*model);
        impl_->compiled = impl_->core.compile_model(model, "CPU", config);
        impl_->request = impl_->compiled.create_infer_request();
    } catch (const std::exception& e) {
        throw BackendError("OpenVINO cannot load '" + path + "' (" + reason(e.what()) +
                           "): run it on ONNX Runtime, or give OpenVINO a file from 'vitdeploy export'");
    }
    std::set<std::string> declared;
    if (file_metadata.has("output_names") && file_metadata.get("output_names").is_array())
        for (const auto& v : file_metadata.get("output_names").as_array())
            if (v.is_string()) declared.insert(v.as_string());
    if (file_metadata.has("output_name")) declared.insert(file_metadata.get_string_or("output_name", ""));
    for (const auto& port : impl_->compiled.inputs()) inputs_.push_back(describe(port, port.get_any_name()));
    for (const auto& port : impl_->compiled.outputs()) outputs_.push_back(describe(port, port_name(port, declared)));
    for (const auto& info : inputs_)
        if (info.type == ElementType::Unsupported)
            throw BackendError("input '" + info.name + "' of '" + path + "' has an element type this backend does not feed");
    inference_precision_ = impl_->compiled.get_property(ov::hint::inference_precision).to_string();
    if (inference_precision_ != precision)
        warnings_.push_back("OpenVINO runs inference precision " + inference_precision_ + ", not the " + precision +
                            " asked for: its CPU plugin has no " + precision + " kernels for this CPU");
    metadata_ = options.metadata_path.empty() ? file_metadata : Metadata::from_sidecar_file(options.metadata_path);
}

OpenVinoBackend::~OpenVinoBackend() = default;

std::map<std::string, Tensor> OpenVinoBackend::run(const std::map<std::string, Tensor>& feeds) {
    check_feeds(feeds);
    const auto ports = impl_->compiled.inputs();
    try {
        for (std::size_t i = 0; i < inputs_.size(); ++i) {
            const TensorInfo& info = inputs_[i];
            const Tensor& t = feeds.at(info.name);
            ov::Shape shape(t.shape.begin(), t.shape.end());
            ov::Tensor value(ports[i].get_element_type(), shape);
            encode_elements(t.data.data(), t.data.size(), info.type, value.data());
            impl_->request.set_tensor(ports[i], value);  // the request holds the tensor (shared ownership)
        }
        impl_->request.infer();
    } catch (const std::exception& e) {
        throw BackendError("OpenVINO failed to run '" + path_ + "' (" + reason(e.what()) + ")");
    }
    std::map<std::string, Tensor> out;
    const auto outs = impl_->compiled.outputs();
    for (std::size_t i = 0; i < outs.size(); ++i) {
        ov::Tensor value = impl_->request.get_tensor(outs[i]);
        ElementType type = from_openvino(value.get_element_type());
        if (type == ElementType::Unsupported)
            throw BackendError("output '" + outputs_[i].name + "' of '" + path_ + "' has an unsupported element type");
        Tensor t;
        for (auto d : value.get_shape()) t.shape.push_back(static_cast<std::int64_t>(d));
        t.data.resize(value.get_size());
        decode_elements(value.data(), t.data.size(), type, t.data.data());
        out.emplace(outputs_[i].name, std::move(t));
    }
    return out;
}

}  // namespace vitdeploy
