// Short-time Fourier magnitudes and mel filterbanks of mono audio: the front end of the audio
// encoders that take log-mel features (Qwen3-TTS's speaker encoder; any family's that uses the
// same pieces). The callers pad the waveform and take the logarithm themselves, because those steps
// differ between models.
//
// Everything is computed in float64 and returned as float32. Pure functions; any thread.
// Errors: omni::Error(kInvalidArgument) naming the parameter.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace omni::model {

// |STFT| of `samples` (no padding: frame f covers samples [f·hop, f·hop + n_fft)), window = periodic
// Hann of n_fft points, one-sided: [frames, n_fft / 2 + 1] row-major with
// magnitude = sqrt(re² + im² + magnitude_eps). frames = (len − n_fft) / hop + 1 (0 when shorter).
std::vector<float> stft_magnitude(std::span<const float> samples, int n_fft, int hop, double magnitude_eps,
                                  int64_t* frames);

// The mel filterbank of librosa.filters.mel with its defaults: Slaney's mel scale (linear below
// 1 kHz, logarithmic above) and Slaney's area normalisation (each triangle scaled by
// 2 / (its upper − lower edge in Hz)). [n_mels, n_fft / 2 + 1] row-major.
std::vector<double> slaney_mel_filterbank(int sample_rate, int n_fft, int n_mels, double fmin, double fmax);

// Rows [frames, n_bins] of `spectrum` through `filterbank` [n_mels, n_bins]: [frames, n_mels].
std::vector<float> apply_filterbank(std::span<const float> spectrum, int64_t frames, std::span<const double> filterbank,
                                    int n_mels);

// `samples` padded on both sides by `pad` samples mirrored at the ends without repeating the edge
// sample (numpy's / PyTorch's "reflect"); needs pad < len.
std::vector<float> reflect_pad(std::span<const float> samples, int64_t pad);

}  // namespace omni::model
