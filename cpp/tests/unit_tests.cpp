// Unit tests that need nothing but the library: JSON, metadata, SHA-256, half floats, the engine
// sidecar rules (the same cases as the Python engine compat rules), image I/O errors, shapes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <unistd.h>

#include "check.hpp"
#include "vitdeploy/backend.hpp"
#include "vitdeploy/engine_sidecar.hpp"
#include "vitdeploy/error.hpp"
#include "vitdeploy/image.hpp"
#include "vitdeploy/json.hpp"
#include "vitdeploy/metadata.hpp"
#include "vitdeploy/postprocess.hpp"
#include "vitdeploy/preprocess.hpp"
#include "vitdeploy/runtime_facts.hpp"
#include "vitdeploy/sha256.hpp"
#include "vitdeploy/tensor.hpp"

using namespace vitdeploy;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
    static fs::path dir = [] {
        fs::path d = fs::temp_directory_path() / ("vitdeploy_unit_" + std::to_string(::getpid()));
        fs::create_directories(d);
        return d;
    }();
    return dir;
}

std::string write_file(const std::string& name, const std::string& content) {
    fs::path p = temp_dir() / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
}

// A valid sidecar for a plan holding ``plan_bytes``; ``extra`` replaces build_options/gpu fields.
std::string sidecar_json(const std::string& plan_bytes, const std::string& trt = "10.13.0.35", const std::string& cc = "8.9",
                         const std::string& gpu = "NVIDIA L4", const std::string& options = "{}") {
    return std::string("{\"schema\": \"vitdeploy.engine-sidecar/1\", ") + "\"plan\": {\"file\": \"m.plan\", \"size_bytes\": " +
           std::to_string(plan_bytes.size()) + ", \"sha256\": \"" + sha256_hex(plan_bytes.data(), plan_bytes.size()) + "\"}, " +
           "\"onnx\": {\"file\": \"m.onnx\"}, \"tensorrt\": {\"version\": \"" + trt + "\"}, " +
           "\"gpu\": {\"name\": \"" + gpu + "\", \"compute_capability\": \"" + cc + "\", \"index\": 0}, " +
           "\"build_options\": " + options + ", " +
           "\"metadata\": {\"family\": \"sam_image_encoder\", \"input_size\": [64, 64]}, " +
           "\"io\": {\"inputs\": [{\"name\": \"image\", \"dtype\": \"float32\", \"shape\": [1, 3, 64, 64]}], " +
           "\"outputs\": [{\"name\": \"image_embeddings\", \"dtype\": \"float32\", \"shape\": [1, 16, 8, 8]}]}}";
}

}  // namespace

TEST_CASE(json_parses_nested_values_and_python_specials) {
    Json j = Json::parse(R"({"a": [1, 2.5, -3e2, true, null], "b": {"c": "x\u00e9\n"}, "n": NaN, "i": -Infinity})");
    CHECK(j.is_object());
    CHECK(j.find("a")->as_array().size() == 5);
    CHECK(j.find("a")->as_array()[2].as_number() == -300.0);
    CHECK(j.find("a")->as_array()[3].as_bool());
    CHECK(j.find("a")->as_array()[4].is_null());
    CHECK(j.find("b")->find("c")->as_string() == "x\xc3\xa9\n");
    CHECK(std::isnan(j.find("n")->as_number()));
    CHECK(std::isinf(j.find("i")->as_number()));
    CHECK(j.find("missing") == nullptr);
    CHECK(Json::parse("[123.675, 116.28]").as_array()[0].as_number() == 123.675);
    CHECK(Json::parse("{\"k\": 1, \"k\": 2}").find("k")->as_integer() == 2);  // last duplicate wins, like Python
    CHECK(Json::parse(Json::parse(R"({"s": "q\"\\", "v": [1, 0.1]})").dump()).find("v")->as_array()[1].as_number() == 0.1);
}

TEST_CASE(json_rejects_malformed_text_with_the_offset) {
    CHECK_THROWS(MetadataError, Json::parse("[1, 2,]", "x.json"), "x.json is not valid JSON");
    CHECK_THROWS(MetadataError, Json::parse("{\"a\": 1} trailing"), "unexpected text after the value");
    CHECK_THROWS(MetadataError, Json::parse("\"unterminated"), "unterminated string");
    CHECK_THROWS(MetadataError, Json::parse("01x"), "at byte");
    CHECK_THROWS(MetadataError, Json::parse(std::string(100, '[') + std::string(100, ']')), "nesting deeper");
    CHECK_THROWS(MetadataError, Json::parse("1.5").as_integer(), "expected an integer");
    CHECK_THROWS(MetadataError, Json::parse("\"s\"").as_number(), "expected a number, got a string");
}

TEST_CASE(metadata_from_properties_decodes_like_python) {
    Metadata m = Metadata::from_properties({{"vitdeploy.family", "sam_image_encoder"},
                                            {"vitdeploy.input_size", "[64, 64]"},
                                            {"vitdeploy.random_weights", "true"},
                                            {"vitdeploy.checkpoint", "null"},
                                            {"pkg.torch.other", "ignored"}},
                                           "'enc.onnx'");
    CHECK(m.get_string("family") == "sam_image_encoder");
    CHECK(m.get_ints("input_size") == (std::vector<std::int64_t>{64, 64}));
    CHECK(m.get_bool("random_weights"));
    CHECK(m.get("checkpoint").is_null());
    CHECK(!m.has("pkg.torch.other") && !m.has("other"));
    CHECK_THROWS(MetadataError, m.get("pixel_mean"), "'enc.onnx' has no 'pixel_mean' metadata");
    CHECK_THROWS(MetadataError, m.get_numbers("family"), "expected a list of numbers");
    CHECK_THROWS(MetadataError, m.require_part("sam", "mask_decoder", "--decoder"),
                 "is a 'sam_image_encoder' model, but --decoder needs the mask_decoder of a sam model");
    CHECK_THROWS(MetadataError, Metadata::from_properties({}, "'x.onnx'").require_part("sam", "image_encoder", "--encoder"),
                 "carries no vitdeploy metadata");
}

TEST_CASE(metadata_from_json_accepts_plain_prefixed_and_wrapped_forms) {
    Metadata plain = Metadata::from_json(Json::parse(R"({"family": "sam_image_encoder", "input_size": [8, 8]})"), "a");
    Metadata prefixed = Metadata::from_json(Json::parse(R"({"vitdeploy.family": "sam_image_encoder", "vitdeploy.input_size": "[8, 8]"})"), "b");
    Metadata wrapped = Metadata::from_json(Json::parse(R"({"schema": "x", "metadata": {"family": "sam_image_encoder", "input_size": [8, 8]}})"), "c");
    for (const Metadata* m : {&plain, &prefixed, &wrapped}) {
        CHECK(m->get_string("family") == "sam_image_encoder");
        CHECK(m->get_ints("input_size") == (std::vector<std::int64_t>{8, 8}));
    }
    CHECK_THROWS(MetadataError, Metadata::from_json(Json::parse("[1]"), "d"), "must be a JSON object");
    CHECK_THROWS(MetadataError, Metadata::from_sidecar_file((temp_dir() / "nope.json").string()), "not found");
    CHECK_THROWS(MetadataError, Metadata::from_sidecar_file(write_file("bad.json", "{oops")), "is not valid JSON");
}

TEST_CASE(runtime_facts_are_the_data_file_python_reads) {
    std::ifstream in(VITDEPLOY_RUNTIME_FACTS_PATH, std::ios::binary);
    const std::string on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(!on_disk.empty() && on_disk == runtime_facts_json());  // compiled in byte for byte
    const RuntimeFacts& facts = runtime_facts();
    CHECK(facts.model_part("sam_mask_decoder") == std::make_pair(std::string("sam"), std::string("mask_decoder")));
    CHECK(facts.model_part("no_such_family").first.empty());
    CHECK(!facts.reported_flags.empty() && facts.reported_flags.front() == "avx2");
    CHECK(facts.cpu_runtimes.size() == 2 && facts.cpu_runtimes.front().name == "onnxruntime");
}

TEST_CASE(sha256_matches_the_standard_vectors) {
    CHECK(sha256_hex("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha256_hex("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK(sha256_hex(two_blocks.data(), two_blocks.size()) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    std::string million(1000000, 'a');
    CHECK(sha256_hex(million.data(), million.size()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    // Streamed from a file in blocks: a million bytes cross no block edge, nine million cross two.
    CHECK(sha256_file_hex(write_file("million.bin", million)) == sha256_hex(million.data(), million.size()));
    std::string nine(9000000, 'b');
    nine[4194303] = 'x';  // the last byte of the first block
    CHECK(sha256_file_hex(write_file("nine.bin", nine)) == sha256_hex(nine.data(), nine.size()));
    CHECK(sha256_file_hex(write_file("empty.bin", "")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK_THROWS(InputError, sha256_file_hex((temp_dir() / "nope.bin").string()), "cannot read");
}

TEST_CASE(half_and_bfloat16_round_to_nearest_even) {
    CHECK(float_to_half(1.0f) == 0x3C00);
    CHECK(float_to_half(-2.0f) == 0xC000);
    CHECK(float_to_half(65504.0f) == 0x7BFF);
    CHECK(float_to_half(65520.0f) == 0x7C00);           // rounds up to infinity
    CHECK(float_to_half(5.9604645e-8f) == 0x0001);      // smallest subnormal
    CHECK(float_to_half(2.9802322e-8f) == 0x0000);      // half of it: ties to even (zero)
    CHECK(float_to_half(1.0f + 1.0f / 2048) == 0x3C00); // tie to even
    CHECK(std::isnan(half_to_float(float_to_half(std::nanf("")))));
    for (std::uint32_t bits = 0; bits < 0x7C00; ++bits) {  // every finite positive half survives a round trip
        if (float_to_half(half_to_float(static_cast<std::uint16_t>(bits))) != bits) {
            CHECK_MSG(false, "half round trip " + std::to_string(bits));
            break;
        }
    }
    CHECK(float_to_bfloat16(1.0f) == 0x3F80);
    CHECK(bfloat16_to_float(float_to_bfloat16(3.140625f)) == 3.140625f);
    float values[3] = {1.5f, -2.0f, 7.9f};
    unsigned char buf[24];
    float back[3];
    encode_elements(values, 3, ElementType::Int64, buf);
    decode_elements(buf, 3, ElementType::Int64, back);
    CHECK(back[0] == 1.0f && back[1] == -2.0f && back[2] == 7.0f);
}

TEST_CASE(tensorrt_version_rules_follow_the_python_compat_module) {
    CHECK(tensorrt_version_can_run("10.13.0.35", "10.13.0", false));  // the build number is packaging
    CHECK(!tensorrt_version_can_run("10.13.0", "10.14.0", false));
    CHECK(tensorrt_version_can_run("10.13.0", "10.14.0", true));
    CHECK(!tensorrt_version_can_run("10.14.0", "10.13.0", true));  // never an older runtime
    CHECK(tensorrt_version_can_run("10.5.0", "11.0.0", true));
    CHECK(tensorrt_version_can_run("8.6.1", "10.0.0", true));
    CHECK(!tensorrt_version_can_run("8.6.1", "11.0.0", true));
    CHECK(!tensorrt_version_can_run("", "10.0.0", true));
}

TEST_CASE(engine_sidecar_checks_plan_gpu_and_io) {
    const std::string plan_bytes = "not really a plan, but bytes with a digest";
    std::string plan = write_file("m.plan", plan_bytes);
    write_file("m.plan.json", sidecar_json(plan_bytes));
    EngineSidecar sc = EngineSidecar::read(plan);
    CHECK(sc.metadata().get_string("family") == "sam_image_encoder");
    sc.check_plan(plan, plan_bytes);
    CHECK_THROWS(MetadataError, sc.check_plan(plan, plan_bytes + "x"), "the plan is truncated or was replaced");
    std::string swapped = plan_bytes;
    swapped[0] = 'N';
    CHECK_THROWS(MetadataError, sc.check_plan(plan, swapped), "does not match the SHA-256");

    CHECK(sc.check_compat({"10.13.0", "NVIDIA L4", "8.9"}, "m.plan").empty());
    CHECK(sc.check_compat({"10.13.0", "NVIDIA RTX 4090", "8.9"}, "m.plan").size() == 1);  // another model: a warning
    CHECK_THROWS(MetadataError, sc.check_compat({"10.13.0", "NVIDIA H100", "9.0"}, "m.plan"), "do not move between GPU architectures");
    CHECK_THROWS(MetadataError, sc.check_compat({"10.14.0", "NVIDIA L4", "8.9"}, "m.plan"), "built with TensorRT 10.13.0.35");
    write_file("m.plan.json", sidecar_json(plan_bytes, "10.13.0", "8.9", "NVIDIA L4",
                                          R"({"hardware_compatibility": "ampere_plus", "version_compatible": true})"));
    EngineSidecar amp = EngineSidecar::read(plan);
    CHECK(amp.check_compat({"11.0.0", "NVIDIA H100", "9.0"}, "m.plan").empty());
    CHECK_THROWS(MetadataError, amp.check_compat({"10.13.0", "Tesla T4", "7.5"}, "m.plan"), "for Ampere and newer GPUs");
    std::string rtx = sidecar_json(plan_bytes, "1.7.1.116");
    rtx.replace(rtx.find("\"version\": \"1.7.1.116\""), 22, "\"version\": \"1.7.1.116\", \"library\": \"tensorrt-rtx\"");
    write_file("m.plan.json", rtx);
    CHECK_THROWS(MetadataError, EngineSidecar::read(plan).check_compat({"10.13.0", "NVIDIA L4", "8.9"}, "m.plan"),
                 "was built by TensorRT-RTX 1.7.1.116, and the C++ library's TensorRT backend runs classic TensorRT engines only");

    std::vector<TensorInfo> in = {{"image", ElementType::Float32, {1, 3, 64, 64}}};
    std::vector<TensorInfo> out = {{"image_embeddings", ElementType::Float32, {1, 16, 8, 8}}};
    sc.check_io(in, out);
    std::vector<TensorInfo> other_out = {{"image_embeddings", ElementType::Float32, {1, 256, 64, 64}}};
    CHECK_THROWS(MetadataError, sc.check_io(in, other_out), "the sidecar belongs to another engine");
    std::vector<TensorInfo> half_in = {{"image", ElementType::Float16, {1, 3, 64, 64}}};
    CHECK_THROWS(MetadataError, sc.check_io(half_in, out), "does not match the engine");

    CHECK_THROWS(MetadataError, EngineSidecar::read(write_file("lonely.plan", "x")), "has no sidecar");
    write_file("old.plan.json", R"({"schema": "something-else"})");
    CHECK_THROWS(MetadataError, EngineSidecar::read(write_file("old.plan", "x")), "expected 'vitdeploy.engine-sidecar/1'");
    write_file("part.plan.json", R"({"schema": "vitdeploy.engine-sidecar/1", "plan": {"size_bytes": 1}})");
    CHECK_THROWS(MetadataError, EngineSidecar::read(write_file("part.plan", "x")), "lacks plan.sha256, tensorrt.version, gpu.compute_capability");
}

TEST_CASE(preprocess_shape_and_preprocessor_metadata) {
    CHECK(preprocess_shape(480, 640, 1024) == std::make_pair(768, 1024));
    CHECK(preprocess_shape(1000, 10, 64) == std::make_pair(64, 1));
    CHECK(preprocess_shape(3, 2, 1024) == std::make_pair(1024, 683));
    Metadata ok = Metadata::from_json(Json::parse(R"({"input_size": [64, 64], "pixel_mean": [1, 2, 3], "pixel_std": [4, 5, 6]})"), "m");
    SamPreprocessor pre = SamPreprocessor::from_metadata(ok);
    CHECK(pre.input_size() == 64 && pre.pixel_std()[2] == 6.0f);
    CHECK_THROWS(MetadataError, SamPreprocessor::from_metadata(Metadata::from_json(
                     Json::parse(R"({"input_size": [64, 32], "pixel_mean": [1, 2, 3], "pixel_std": [4, 5, 6]})"), "m")),
                 "expected a square [S, S] size");
    CHECK_THROWS(MetadataError, SamPreprocessor::from_metadata(Metadata::from_json(
                     Json::parse(R"({"input_size": [64, 64], "pixel_mean": [1, 2], "pixel_std": [4, 5, 6]})"), "m")),
                 "expected 3 (R, G, B)");
    CHECK_THROWS(MetadataError, SamPreprocessor::from_metadata(Metadata::from_json(
                     Json::parse(R"({"input_size": [64, 64], "pixel_mean": [1, 2, 3], "pixel_std": [4, 0, 6]})"), "m")),
                 "pixel_std must be finite and non-zero");
    RgbImage flat(10, 7);
    std::fill(flat.pixels.begin(), flat.pixels.end(), 77);
    RgbImage resized = pre.resize(flat);
    CHECK(resized.width == 64 && resized.height == 45);
    CHECK(std::all_of(resized.pixels.begin(), resized.pixels.end(), [](auto v) { return v == 77; }));
    std::vector<float> x = pre.normalize_and_pad(resized);
    CHECK(x.size() == 3u * 64 * 64);
    CHECK(x[0] == (77.0f - 1.0f) / 4.0f && x[63 * 64 + 63] == 0.0f);  // inside, and in the padding
    CHECK_THROWS(InputError, pre.resize(RgbImage()), "empty side");
    std::vector<float> c = transform_coords({5.0, 3.5}, 7, 10, 64);
    CHECK(c[0] == static_cast<float>(5.0 * (64.0 / 10)) && c[1] == static_cast<float>(3.5 * (45.0 / 7)));
}

TEST_CASE(bilinear_matrix_rows_sum_to_one_and_upscaler_keeps_constants) {
    std::vector<double> m = bilinear_matrix(7, 20);
    for (int r = 0; r < 20; ++r) {
        double sum = 0;
        for (int c = 0; c < 7; ++c) sum += m[r * 7 + c];
        CHECK(std::abs(sum - 1.0) < 1e-12);
    }
    MaskUpscaler up = MaskUpscaler::for_image(16, 16, 64, 30, 50);
    std::vector<float> low(16 * 16, 2.5f);
    std::vector<float> out = up(low.data(), 1);
    CHECK(out.size() == 30u * 50);
    CHECK(std::all_of(out.begin(), out.end(), [](float v) { return std::abs(v - 2.5f) < 1e-5f; }));
    std::vector<std::uint8_t> mask = threshold_mask(out.data(), out.size(), 2.6f);
    CHECK(std::all_of(mask.begin(), mask.end(), [](auto v) { return v == 0; }));
}

TEST_CASE(images_errors_name_the_problem_and_masks_round_trip) {
    CHECK_THROWS(InputError, read_image((temp_dir() / "missing.png").string()), "not found: check the path");
    CHECK_THROWS(InputError, read_image(write_file("garbage.png", "this is not an image")), "cannot be decoded");
    CHECK_THROWS(InputError, read_image(write_file("empty.png", "")), "empty file");
    CHECK_THROWS(InputError, read_image(write_file("truncated.png", std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16))),
                 "cannot be decoded");
    std::vector<std::uint8_t> mask = {0, 255, 255, 0, 255, 0};
    std::string path = (temp_dir() / "mask.png").string();
    write_png_gray(path, 3, 2, mask);
    RgbImage back = read_image(path);
    CHECK(back.width == 3 && back.height == 2);
    for (int i = 0; i < 6; ++i) CHECK(back.pixels[i * 3] == mask[i] && back.pixels[i * 3 + 2] == mask[i]);
    CHECK_THROWS(InputError, write_png_gray((temp_dir() / "no_such_dir" / "m.png").string(), 3, 2, mask), "does not exist");
    CHECK(!fs::exists(temp_dir() / "no_such_dir"));
}

TEST_CASE(exif_orientation_reads_both_byte_orders_and_ignores_malformed_blocks) {
    // IFD0 with two entries (ImageWidth, then Orientation = 8), little- and big-endian.
    const std::vector<std::uint8_t> little = {'I', 'I', 42, 0, 8, 0, 0, 0, 2, 0,
                                              0x00, 0x01, 3, 0, 1, 0, 0, 0, 64, 0, 0, 0,
                                              0x12, 0x01, 3, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0};
    const std::vector<std::uint8_t> big = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 2,
                                           0x01, 0x00, 0, 3, 0, 0, 0, 1, 0, 64, 0, 0,
                                           0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0};
    CHECK(exif_orientation(little.data(), little.size()) == 8);
    CHECK(exif_orientation(big.data(), big.size()) == 6);
    CHECK(exif_orientation(little.data(), 30) == 1);  // cut inside the orientation entry
    std::vector<std::uint8_t> bad_value = little;
    bad_value[30] = 9;
    CHECK(exif_orientation(bad_value.data(), bad_value.size()) == 1);
    std::vector<std::uint8_t> far_ifd = little;
    far_ifd[4] = 0xF0;
    CHECK(exif_orientation(far_ifd.data(), far_ifd.size()) == 1);
    CHECK(exif_orientation(nullptr, 0) == 1);
    // 2x3 image, rotate 90 clockwise (6) then counter-clockwise (8): back where it was; 6 gives 3x2.
    RgbImage image(2, 3);
    for (std::size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = static_cast<std::uint8_t>(i);
    RgbImage turned = apply_exif_orientation(image, 6);
    CHECK(turned.width == 3 && turned.height == 2);
    CHECK(turned.row(0)[0] == image.row(2)[0]);  // the bottom-left pixel comes to the top-left
    CHECK(apply_exif_orientation(turned, 8).pixels == image.pixels);
    CHECK(apply_exif_orientation(apply_exif_orientation(image, 3), 3).pixels == image.pixels);
}

TEST_CASE(open_model_rejects_missing_files_and_unknown_kinds) {
    CHECK_THROWS(InputError, open_model((temp_dir() / "none.onnx").string()), "not found");
    CHECK_THROWS(InputError, open_model(write_file("model.bin", "x")), "unknown extension '.bin'");
#ifndef VITDEPLOY_WITH_TENSORRT
    CHECK_THROWS(BackendError, open_model(write_file("model.plan", "x")), "no TensorRT backend");
#endif
#ifdef VITDEPLOY_WITH_ONNXRUNTIME
    CHECK_THROWS(BackendError, open_model(write_file("broken.onnx", "not protobuf")), "ONNX Runtime cannot load");
#endif
}

int main() {
    int rc = check::run_all();
    std::error_code ec;
    fs::remove_all(temp_dir(), ec);
    return rc;
}
