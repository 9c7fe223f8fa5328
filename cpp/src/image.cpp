// Image decoding with libpng (and libjpeg when found), matching Pillow's convert("RGB").
//
// libpng and libjpeg report errors by longjmp. A longjmp must not skip C++ destructors, so every
// setjmp below lives in a small helper whose locals are all trivially destructible; buffers are
// owned by the caller and allocated between the header and pixel phases.
#include "vitdeploy/image.hpp"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include <unistd.h>

#include "vitdeploy/error.hpp"

#ifdef VITDEPLOY_HAVE_JPEG
#include <jpeglib.h>
#include <jerror.h>  // JWRN_JPEG_EOF
#endif

namespace vitdeploy {

namespace {

constexpr std::size_t kMaxPixels = std::size_t(1) << 28;  // 268 MP: past Pillow's decompression-bomb error too

[[noreturn]] void undecodable(const std::string& path, const std::string& why) {
    throw InputError("image '" + path + "' cannot be decoded (" + why + "): use a valid PNG" +
                     (jpeg_supported() ? std::string(" or JPEG") : std::string()) + " file");
}

struct FileCloser {
    void operator()(FILE* f) const {
        if (f) std::fclose(f);
    }
};
using File = std::unique_ptr<FILE, FileCloser>;

// ---------------------------------------------------------------------------------------------- PNG

struct PngState {
    png_structp png = nullptr;
    png_infop info = nullptr;
    char message[256] = {0};
};

void png_error_fn(png_structp png, png_const_charp msg) {
    auto* state = static_cast<PngState*>(png_get_error_ptr(png));
    std::snprintf(state->message, sizeof state->message, "%s", msg);
    png_longjmp(png, 1);
}

// libpng warnings (an unknown chunk, an odd ICC profile) do not stop decoding, and Pillow decodes such
// files too; the image is still read exactly.
void png_warning_fn(png_structp, png_const_charp) {}

struct PngLayout {
    png_uint_32 width = 0;
    png_uint_32 height = 0;
    int channels = 0;        // after transforms: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA
    int bit_depth = 0;       // after transforms: 8, or 16 for 16-bit grey kept for scaling
    std::size_t rowbytes = 0;
    int orientation = 1;     // EXIF orientation of an eXIf chunk before the pixels
};

bool png_read_layout(PngState* s, FILE* fp, PngLayout* out) {
    if (setjmp(png_jmpbuf(s->png))) return false;
    png_init_io(s->png, fp);
    png_set_sig_bytes(s->png, 8);
    png_set_user_limits(s->png, 1u << 24, 1u << 24);
    png_read_info(s->png, s->info);
#ifdef PNG_eXIf_SUPPORTED
    png_uint_32 exif_size = 0;
    png_bytep exif = nullptr;
    if (png_get_eXIf_1(s->png, s->info, &exif_size, &exif) != 0 && exif != nullptr)
        out->orientation = exif_orientation(exif, exif_size);
#endif
    png_uint_32 width = 0, height = 0;
    int depth = 0, color = 0;
    png_get_IHDR(s->png, s->info, &width, &height, &depth, &color, nullptr, nullptr, nullptr);
    // 16-bit grey (mode "I;16" in Pillow) is scaled from the image's own min..max to 0..255, as
    // vitdeploy.runtime.processing.images.to_rgb8 does (convert("RGB") would clip it to white); every other 16-bit
    // layout Pillow unpacks by taking the high byte of each sample ("RGB;16B", "LA;16B"...).
    bool scale_grey16 = depth == 16 && color == PNG_COLOR_TYPE_GRAY;
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(s->png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(s->png);  // 1 -> 255, like mode "1"
    if (depth == 16 && !scale_grey16) png_set_strip_16(s->png);  // keeps the high byte
    png_set_interlace_handling(s->png);
    png_read_update_info(s->png, s->info);
    out->width = width;
    out->height = height;
    out->channels = png_get_channels(s->png, s->info);
    out->bit_depth = png_get_bit_depth(s->png, s->info);
    out->rowbytes = png_get_rowbytes(s->png, s->info);
    return true;
}

bool png_read_rows(PngState* s, png_bytep* rows) {
    if (setjmp(png_jmpbuf(s->png))) return false;
    png_read_image(s->png, rows);
    return true;
}

RgbImage read_png(const std::string& path, FILE* fp, int* orientation) {
    PngState state;
    state.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &state, png_error_fn, png_warning_fn);
    if (!state.png) throw InputError("out of memory reading image '" + path + "'");
    state.info = png_create_info_struct(state.png);
    struct Cleanup {
        PngState* s;
        ~Cleanup() { png_destroy_read_struct(&s->png, s->info ? &s->info : nullptr, nullptr); }
    } cleanup{&state};
    if (!state.info) throw InputError("out of memory reading image '" + path + "'");

    PngLayout layout;
    if (!png_read_layout(&state, fp, &layout)) undecodable(path, state.message);
    if (layout.width == 0 || layout.height == 0) undecodable(path, "empty image");
    if (static_cast<std::size_t>(layout.width) * layout.height > kMaxPixels)
        throw InputError("image '" + path + "' is too large (" + std::to_string(layout.width) + "x" +
                         std::to_string(layout.height) + "): downscale it first");

    std::vector<png_byte> raw(layout.rowbytes * layout.height);
    std::vector<png_bytep> rows(layout.height);
    for (png_uint_32 y = 0; y < layout.height; ++y) rows[y] = raw.data() + y * layout.rowbytes;
    if (!png_read_rows(&state, rows.data())) undecodable(path, state.message);

    *orientation = layout.orientation;
    RgbImage image(static_cast<int>(layout.width), static_cast<int>(layout.height));
    const int c = layout.channels;
    unsigned lo = 65535, hi = 0;  // 16-bit grey: the range scaled to 0..255
    if (layout.bit_depth == 16) {
        for (png_uint_32 y = 0; y < layout.height; ++y)
            for (png_uint_32 x = 0; x < layout.width; ++x) {
                unsigned v = (unsigned(rows[y][2 * x]) << 8) | rows[y][2 * x + 1];
                lo = std::min(lo, v);
                hi = std::max(hi, v);
            }
    }
    const double scale = hi > lo ? 255.0 / double(hi - lo) : 0.0;
    for (png_uint_32 y = 0; y < layout.height; ++y) {
        const png_byte* in = rows[y];
        std::uint8_t* out = image.row(static_cast<int>(y));
        for (png_uint_32 x = 0; x < layout.width; ++x, out += 3) {
            if (layout.bit_depth == 16) {  // 16-bit grey, big-endian samples
                unsigned v = (unsigned(in[2 * x]) << 8) | in[2 * x + 1];
                // (v - lo) * (255 / (hi - lo)) in double, rounded half to even: numpy's np.round of the same
                double scaled = hi > lo ? std::nearbyint(double(v - lo) * scale) : 0.0;
                out[0] = out[1] = out[2] = static_cast<std::uint8_t>(scaled);
            } else if (c <= 2) {  // grey (+ alpha, dropped)
                out[0] = out[1] = out[2] = in[x * c];
            } else {  // RGB (+ alpha, dropped)
                out[0] = in[x * c];
                out[1] = in[x * c + 1];
                out[2] = in[x * c + 2];
            }
        }
    }
    return image;
}

// --------------------------------------------------------------------------------------------- JPEG

#ifdef VITDEPLOY_HAVE_JPEG
struct JpegErrors {
    jpeg_error_mgr mgr;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
    auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, errors->message);
    std::longjmp(errors->jump, 1);
}

// libjpeg pads a truncated file with grey and only warns; Pillow raises "image file is truncated".
void jpeg_emit_message(j_common_ptr cinfo, int level) {
    if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_error_exit(cinfo);
}

bool jpeg_read_layout(jpeg_decompress_struct* cinfo, JpegErrors* errors, FILE* fp, bool* unsupported_colour) {
    if (setjmp(errors->jump)) return false;
    jpeg_create_decompress(cinfo);
    jpeg_stdio_src(cinfo, fp);
    jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xFFFF);  // APP1: EXIF (orientation)
    jpeg_read_header(cinfo, TRUE);
    *unsupported_colour = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
    if (*unsupported_colour) return true;
    // Pillow asks libjpeg for RGB (or grey, replicated by convert("RGB")) with default decoding settings
    // (JDCT_ISLOW, fancy upsampling), so do the same.
    cinfo->out_color_space = JCS_RGB;
    jpeg_start_decompress(cinfo);
    return true;
}

bool jpeg_read_rows(jpeg_decompress_struct* cinfo, JpegErrors* errors, std::uint8_t* pixels) {
    if (setjmp(errors->jump)) return false;
    const std::size_t stride = static_cast<std::size_t>(cinfo->output_width) * 3;
    while (cinfo->output_scanline < cinfo->output_height) {
        JSAMPROW row = pixels + cinfo->output_scanline * stride;
        jpeg_read_scanlines(cinfo, &row, 1);
    }
    jpeg_finish_decompress(cinfo);
    return true;
}

int jpeg_orientation(const jpeg_decompress_struct& cinfo) {
    for (jpeg_saved_marker_ptr m = cinfo.marker_list; m != nullptr; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length > 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0)
            return exif_orientation(m->data + 6, m->data_length - 6);
    return 1;
}

RgbImage read_jpeg(const std::string& path, FILE* fp, int* orientation) {
    jpeg_decompress_struct cinfo;
    JpegErrors errors;
    std::memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&errors.mgr);
    errors.mgr.error_exit = jpeg_error_exit;
    errors.mgr.emit_message = jpeg_emit_message;
    errors.message[0] = '\0';
    struct Cleanup {
        jpeg_decompress_struct* c;
        ~Cleanup() { jpeg_destroy_decompress(c); }
    } cleanup{&cinfo};

    bool cmyk = false;
    if (!jpeg_read_layout(&cinfo, &errors, fp, &cmyk)) undecodable(path, errors.message);
    if (cmyk) undecodable(path, "CMYK JPEG is not supported here; save it as RGB");
    if (cinfo.output_components != 3) undecodable(path, "unexpected JPEG colour layout");
    if (static_cast<std::size_t>(cinfo.output_width) * cinfo.output_height > kMaxPixels)
        throw InputError("image '" + path + "' is too large: downscale it first");
    RgbImage image(static_cast<int>(cinfo.output_width), static_cast<int>(cinfo.output_height));
    *orientation = jpeg_orientation(cinfo);  // saved markers live until jpeg_finish_decompress
    if (!jpeg_read_rows(&cinfo, &errors, image.pixels.data())) undecodable(path, errors.message);
    return image;
}
#endif

// ----------------------------------------------------------------------------------------- PNG out

struct PngWriteState {
    png_structp png = nullptr;
    png_infop info = nullptr;
    char message[256] = {0};
};

bool png_write_all(PngWriteState* s, FILE* fp, int width, int height, png_bytep* rows) {
    if (setjmp(png_jmpbuf(s->png))) return false;
    png_init_io(s->png, fp);
    png_set_IHDR(s->png, s->info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
                 PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(s->png, s->info);
    png_write_image(s->png, rows);
    png_write_end(s->png, nullptr);
    return true;
}

void png_write_error_fn(png_structp png, png_const_charp msg) {
    auto* state = static_cast<PngWriteState*>(png_get_error_ptr(png));
    std::snprintf(state->message, sizeof state->message, "%s", msg);
    png_longjmp(png, 1);
}

}  // namespace

bool jpeg_supported() {
#ifdef VITDEPLOY_HAVE_JPEG
    return true;
#else
    return false;
#endif
}

RgbImage read_image(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw InputError("image '" + path + "' not found: check the path");
    File fp(std::fopen(path.c_str(), "rb"));
    if (!fp) throw InputError("image '" + path + "' cannot be opened (" + std::strerror(errno) + "): check its permissions");
    unsigned char sig[8] = {0};
    std::size_t n = std::fread(sig, 1, sizeof sig, fp.get());
    int orientation = 1;
    if (n == 8 && png_sig_cmp(sig, 0, 8) == 0) {
        RgbImage image = read_png(path, fp.get(), &orientation);  // (sets orientation: not in the same expression)
        return apply_exif_orientation(std::move(image), orientation);
    }
    if (n >= 3 && sig[0] == 0xFF && sig[1] == 0xD8 && sig[2] == 0xFF) {
#ifdef VITDEPLOY_HAVE_JPEG
        std::rewind(fp.get());
        RgbImage image = read_jpeg(path, fp.get(), &orientation);
        return apply_exif_orientation(std::move(image), orientation);
#else
        undecodable(path, "this build has no JPEG support (libjpeg was not found when it was built)");
#endif
    }
    undecodable(path, n == 0 ? "empty file" : "not a PNG or JPEG file");
}

int exif_orientation(const std::uint8_t* data, std::size_t size) {
    // TIFF header: byte order ("II" little, "MM" big), 42, offset of IFD0; IFD0: a 2-byte entry count,
    // then 12-byte entries (tag, type, count, value). Orientation is tag 0x0112, one SHORT (type 3).
    if (data == nullptr || size < 8) return 1;
    const bool little = data[0] == 'I' && data[1] == 'I';
    if (!little && !(data[0] == 'M' && data[1] == 'M')) return 1;
    auto u16 = [&](std::size_t at) -> unsigned {
        return little ? unsigned(data[at]) | unsigned(data[at + 1]) << 8 : unsigned(data[at]) << 8 | unsigned(data[at + 1]);
    };
    auto u32 = [&](std::size_t at) -> std::uint32_t {
        return little ? std::uint32_t(u16(at)) | std::uint32_t(u16(at + 2)) << 16
                      : std::uint32_t(u16(at)) << 16 | std::uint32_t(u16(at + 2));
    };
    if (u16(2) != 42) return 1;
    const std::uint32_t ifd = u32(4);
    if (ifd > size - 2) return 1;
    const unsigned entries = u16(ifd);
    for (unsigned i = 0; i < entries; ++i) {
        const std::size_t at = std::size_t(ifd) + 2 + std::size_t(i) * 12;
        if (at + 12 > size) return 1;
        if (u16(at) == 0x0112 && u16(at + 2) == 3 && u32(at + 4) == 1) {
            const unsigned value = u16(at + 8);
            return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
        }
    }
    return 1;
}

RgbImage apply_exif_orientation(RgbImage image, int orientation) {
    if (orientation < 2 || orientation > 8) return image;
    const int w = image.width, h = image.height;
    const bool swap = orientation >= 5;  // transpose, rotations by 90 and transverse exchange width and height
    RgbImage out(swap ? h : w, swap ? w : h);
    for (int y = 0; y < out.height; ++y) {
        std::uint8_t* dst = out.row(y);
        for (int x = 0; x < out.width; ++x, dst += 3) {
            int sx = x, sy = y;  // the source pixel of output (x, y)
            switch (orientation) {
                case 2: sx = w - 1 - x; break;                  // mirror
                case 3: sx = w - 1 - x; sy = h - 1 - y; break;  // rotate 180
                case 4: sy = h - 1 - y; break;                  // flip
                case 5: sx = y; sy = x; break;                  // transpose
                case 6: sx = y; sy = h - 1 - x; break;          // rotate 90 clockwise
                case 7: sx = w - 1 - y; sy = h - 1 - x; break;  // transverse
                case 8: sx = w - 1 - y; sy = x; break;          // rotate 90 counter-clockwise
            }
            std::memcpy(dst, image.row(sy) + std::size_t(sx) * 3, 3);
        }
    }
    return out;
}

void write_png_gray(const std::string& path, int width, int height, const std::vector<std::uint8_t>& pixels) {
    namespace fs = std::filesystem;
    if (width <= 0 || height <= 0 || pixels.size() != static_cast<std::size_t>(width) * height)
        throw InputError("cannot write '" + path + "': pixel buffer does not match " + std::to_string(width) + "x" +
                         std::to_string(height));
    fs::path target(path);
    fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
    std::error_code ec;
    if (!fs::is_directory(parent, ec))
        throw InputError("output directory '" + parent.string() + "' does not exist: create it or choose another path");
    if (fs::is_directory(target, ec)) throw InputError("output path '" + path + "' is a directory: give a file name");

    fs::path tmp = parent / ("." + target.filename().string() + "." + std::to_string(::getpid()) + ".tmp");
    PngWriteState state;
    bool ok = false;
    {
        File fp(std::fopen(tmp.c_str(), "wb"));
        if (!fp)
            throw InputError("cannot write '" + path + "' (" + std::strerror(errno) + "): choose a writable path");
        state.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &state, png_write_error_fn, png_warning_fn);
        if (state.png) state.info = png_create_info_struct(state.png);
        if (state.png && state.info) {
            std::vector<png_bytep> rows(static_cast<std::size_t>(height));
            for (int y = 0; y < height; ++y)
                rows[y] = const_cast<png_bytep>(pixels.data() + static_cast<std::size_t>(y) * width);
            ok = png_write_all(&state, fp.get(), width, height, rows.data());
        }
        png_destroy_write_struct(&state.png, state.info ? &state.info : nullptr);
        if (ok && std::fflush(fp.get()) != 0) ok = false;
    }
    if (ok) {
        fs::rename(tmp, target, ec);
        ok = !ec;
    }
    if (!ok) {
        fs::remove(tmp, ec);
        throw InputError("cannot write '" + path + "'" + (state.message[0] ? std::string(" (") + state.message + ")" : "") +
                         ": check free space and permissions");
    }
}

}  // namespace vitdeploy
