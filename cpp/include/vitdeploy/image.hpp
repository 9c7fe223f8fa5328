// Images in memory and on disk: 8-bit RGB in, 8-bit masks out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vitdeploy {

/// An 8-bit RGB image, row-major, 3 bytes a pixel (the HxWx3 uint8 array of the Python runtime).
struct RgbImage {
    int width = 0;
    int height = 0;
    std::vector<std::uint8_t> pixels;  // height * width * 3

    RgbImage() = default;
    RgbImage(int w, int h) : width(w), height(h), pixels(static_cast<std::size_t>(w) * h * 3) {}
    std::uint8_t* row(int y) { return pixels.data() + static_cast<std::size_t>(y) * width * 3; }
    const std::uint8_t* row(int y) const { return pixels.data() + static_cast<std::size_t>(y) * width * 3; }
};

/// Read a PNG (or, when built with libjpeg, a JPEG) file as RGB, the way vitdeploy.runtime.images
/// reads it with Pillow: upright (the EXIF orientation of a JPEG's APP1 segment or a PNG's eXIf chunk
/// applied, as ``ImageOps.exif_transpose``), then ``convert("RGB")``: palettes expanded, grey
/// replicated, alpha dropped (not composited), 16-bit colour samples reduced to their high byte,
/// 16-bit grey scaled from its own min..max to 0..255.
/// Throws InputError when the file is missing or cannot be decoded.
RgbImage read_image(const std::string& path);

/// The EXIF orientation (1..8) in a TIFF-structured EXIF block (what follows "Exif\0\0" in a JPEG's
/// APP1 segment, or a PNG's eXIf chunk); 1 (upright) when the tag is absent or the block malformed.
int exif_orientation(const std::uint8_t* data, std::size_t size);

/// ``image`` turned upright for EXIF ``orientation`` (Pillow's exif_transpose: 2 mirror, 3 rotate
/// 180, 4 flip, 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 counter-clockwise).
/// Orientation 1 (or unknown) returns ``image`` itself, moved, not copied.
RgbImage apply_exif_orientation(RgbImage image, int orientation);

/// Whether read_image() decodes JPEG in this build.
bool jpeg_supported();

/// Write an 8-bit single-channel PNG atomically (temporary file in the same folder, then rename):
/// an interrupted run never leaves a half-written file under ``path``. Throws InputError.
void write_png_gray(const std::string& path, int width, int height, const std::vector<std::uint8_t>& pixels);

}  // namespace vitdeploy
