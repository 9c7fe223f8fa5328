// Errors meant for people: what went wrong and what to do about it, on one line.
//
// Mirrors vitdeploy/errors.py: the example app prints what() and exits with code 1 for any of these,
// and with code 2 for a usage error (bad command line). Anything else escaping is a bug.
#pragma once

#include <stdexcept>
#include <string>

namespace vitdeploy {

/// Base of every error the library raises on purpose.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A user-supplied value (path, image, prompt, option) is unusable.
class InputError : public Error {
public:
    using Error::Error;
};

/// Artifact metadata is missing, malformed, or does not match the model it describes.
class MetadataError : public Error {
public:
    using Error::Error;
};

/// An inference runtime failed to load or run a model, or is not compiled into this build.
class BackendError : public Error {
public:
    using Error::Error;
};

}  // namespace vitdeploy
