#include "model/mel_spectrogram.h"

#include <cmath>
#include <complex>
#include <numbers>

#include "base/error.h"
#include "tensor/cpu/thread_pool.h"

namespace omni::model {

namespace {

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// In-place iterative radix-2 FFT (n a power of two).
void fft(std::vector<std::complex<double>>& a) {
  const size_t n = a.size();
  for (size_t i = 1, j = 0; i < n; ++i) {
    size_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(a[i], a[j]);
  }
  for (size_t len = 2; len <= n; len <<= 1) {
    const double angle = -2.0 * std::numbers::pi / static_cast<double>(len);
    for (size_t i = 0; i < n; i += len) {
      for (size_t k = 0; k < len / 2; ++k) {
        const std::complex<double> w = std::polar(1.0, angle * static_cast<double>(k));
        const std::complex<double> u = a[i + k];
        const std::complex<double> v = a[i + k + len / 2] * w;
        a[i + k] = u + v;
        a[i + k + len / 2] = u - v;
      }
    }
  }
}

double hz_to_slaney_mel(double hz) {
  constexpr double kFSp = 200.0 / 3.0, kMinLogHz = 1000.0;
  const double min_log_mel = kMinLogHz / kFSp, logstep = std::log(6.4) / 27.0;
  return hz >= kMinLogHz ? min_log_mel + std::log(hz / kMinLogHz) / logstep : hz / kFSp;
}

double slaney_mel_to_hz(double mel) {
  constexpr double kFSp = 200.0 / 3.0, kMinLogHz = 1000.0;
  const double min_log_mel = kMinLogHz / kFSp, logstep = std::log(6.4) / 27.0;
  return mel >= min_log_mel ? kMinLogHz * std::exp(logstep * (mel - min_log_mel)) : kFSp * mel;
}

}  // namespace

std::vector<float> stft_magnitude(std::span<const float> samples, int n_fft, int hop, double magnitude_eps,
                                  int64_t* frames) {
  if (n_fft < 2) throw_error(ErrorCode::kInvalidArgument, "stft: n_fft {} must be at least 2", n_fft);
  if (hop < 1) throw_error(ErrorCode::kInvalidArgument, "stft: hop {} must be positive", hop);
  const int64_t len = static_cast<int64_t>(samples.size());
  const int64_t n_frames = len < n_fft ? 0 : (len - n_fft) / hop + 1;
  const int bins = n_fft / 2 + 1;
  std::vector<double> window(n_fft);
  for (int i = 0; i < n_fft; ++i) window[i] = 0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * i / n_fft);
  std::vector<float> out(static_cast<size_t>(n_frames) * bins);
  // Frames are independent: each chunk of them on a CPU thread, with its own buffer.
  tensor::cpu::parallel_for(n_frames, 8, [&](int64_t first_frame, int64_t end_frame) {
    std::vector<std::complex<double>> buffer(n_fft);
    for (int64_t f = first_frame; f < end_frame; ++f) {
      const float* frame = samples.data() + f * hop;
      for (int i = 0; i < n_fft; ++i) buffer[i] = {window[i] * frame[i], 0.0};
      if (power_of_two(n_fft)) {
        fft(buffer);
      } else {
        std::vector<std::complex<double>> input = buffer;
        for (int k = 0; k < bins; ++k) {
          std::complex<double> sum = 0.0;
          for (int i = 0; i < n_fft; ++i) {
            sum += input[i] * std::polar(1.0, -2.0 * std::numbers::pi * static_cast<double>(k) * i / n_fft);
          }
          buffer[k] = sum;
        }
      }
      for (int k = 0; k < bins; ++k) {
        out[f * bins + k] = static_cast<float>(std::sqrt(std::norm(buffer[k]) + magnitude_eps));
      }
    }
  });
  *frames = n_frames;
  return out;
}

std::vector<double> slaney_mel_filterbank(int sample_rate, int n_fft, int n_mels, double fmin, double fmax) {
  if (n_mels < 1) throw_error(ErrorCode::kInvalidArgument, "mel filterbank: n_mels {} must be positive", n_mels);
  if (!(fmin >= 0 && fmin < fmax && fmax <= sample_rate / 2.0)) {
    throw_error(ErrorCode::kInvalidArgument, "mel filterbank: need 0 <= fmin {} < fmax {} <= sample_rate / 2 ({})",
                fmin, fmax, sample_rate / 2.0);
  }
  const int bins = n_fft / 2 + 1;
  std::vector<double> edges(n_mels + 2);
  const double lo = hz_to_slaney_mel(fmin), hi = hz_to_slaney_mel(fmax);
  for (int i = 0; i < n_mels + 2; ++i) edges[i] = slaney_mel_to_hz(lo + (hi - lo) * i / (n_mels + 1));
  std::vector<double> bank(static_cast<size_t>(n_mels) * bins, 0.0);
  for (int m = 0; m < n_mels; ++m) {
    const double norm = 2.0 / (edges[m + 2] - edges[m]);
    for (int k = 0; k < bins; ++k) {
      const double hz = static_cast<double>(sample_rate) / 2.0 * k / (bins - 1);
      const double lower = (hz - edges[m]) / (edges[m + 1] - edges[m]);
      const double upper = (edges[m + 2] - hz) / (edges[m + 2] - edges[m + 1]);
      bank[m * bins + k] = std::max(0.0, std::min(lower, upper)) * norm;
    }
  }
  return bank;
}

std::vector<float> apply_filterbank(std::span<const float> spectrum, int64_t frames, std::span<const double> filterbank,
                                    int n_mels) {
  const size_t bins = filterbank.size() / n_mels;
  if (spectrum.size() != static_cast<size_t>(frames) * bins) {
    throw_error(ErrorCode::kInvalidArgument, "mel filterbank: a spectrum of {} values is not {} frames of {} bins",
                spectrum.size(), frames, bins);
  }
  std::vector<float> out(static_cast<size_t>(frames) * n_mels);
  tensor::cpu::parallel_for(frames, 8, [&](int64_t begin, int64_t end) {
    for (int64_t f = begin; f < end; ++f) {
      const float* row = spectrum.data() + f * bins;
      for (int m = 0; m < n_mels; ++m) {
        const double* band = filterbank.data() + m * bins;
        double sum = 0.0;
        for (size_t k = 0; k < bins; ++k) sum += band[k] * row[k];
        out[f * n_mels + m] = static_cast<float>(sum);
      }
    }
  });
  return out;
}

std::vector<float> reflect_pad(std::span<const float> samples, int64_t pad) {
  const int64_t len = static_cast<int64_t>(samples.size());
  if (pad < 0 || pad >= len) {
    throw_error(ErrorCode::kInvalidArgument, "reflect padding by {} needs more than {} samples (got {})", pad, pad,
                len);
  }
  std::vector<float> out(static_cast<size_t>(len + 2 * pad));
  for (int64_t i = 0; i < pad; ++i) out[i] = samples[pad - i];
  std::copy(samples.begin(), samples.end(), out.begin() + pad);
  for (int64_t i = 0; i < pad; ++i) out[pad + len + i] = samples[len - 2 - i];
  return out;
}

}  // namespace omni::model
