// Time stretching (WSOLA): the length scales by 1/speed, a tone keeps its frequency and its level,
// the segments join without clicks, speed 1 is the identity, and bad arguments name the field.
#include "media/time_stretch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "base/error.h"

namespace omni::media {
namespace {

constexpr int kRate = 24000;

std::vector<float> tone(size_t count, double hz, double amplitude = 0.5) {
  std::vector<float> samples(count);
  for (size_t i = 0; i < count; ++i) {
    samples[i] = static_cast<float>(amplitude * std::sin(2 * std::numbers::pi * hz * static_cast<double>(i) / kRate));
  }
  return samples;
}

// The middle 80% of the samples (the ends fade in and out over half a segment).
std::vector<float> middle(const std::vector<float>& samples) {
  const size_t edge = samples.size() / 10;
  return {samples.begin() + static_cast<std::ptrdiff_t>(edge), samples.end() - static_cast<std::ptrdiff_t>(edge)};
}

// The frequency from the upward zero crossings (interpolated between samples): periods counted
// over the time between the first and the last crossing.
double zero_crossing_hz(const std::vector<float>& samples) {
  std::vector<double> crossings;
  for (size_t i = 1; i < samples.size(); ++i) {
    if (samples[i - 1] < 0.0f && samples[i] >= 0.0f) {
      crossings.push_back(static_cast<double>(i - 1) + samples[i - 1] / (samples[i - 1] - samples[i]));
    }
  }
  if (crossings.size() < 2) return 0.0;
  return static_cast<double>(crossings.size() - 1) * kRate / (crossings.back() - crossings.front());
}

double rms(const std::vector<float>& samples) {
  double sum = 0.0;
  for (float s : samples) sum += double(s) * s;
  return std::sqrt(sum / static_cast<double>(samples.size()));
}

double max_step(const std::vector<float>& samples) {
  double step = 0.0;
  for (size_t i = 1; i < samples.size(); ++i) step = std::max(step, std::abs(double(samples[i]) - samples[i - 1]));
  return step;
}

const double kSpeeds[] = {0.25, 0.5, 0.8, 1.25, 1.5, 2.0, 3.0, 4.0};

TEST(TimeStretch, LengthScalesByTheInverseOfTheSpeed) {
  for (size_t length : {size_t{1}, size_t{1919}, size_t{1920} * 7, size_t{24000}}) {
    const std::vector<float> input = tone(length, 200.0);
    for (double speed : kSpeeds) {
      EXPECT_EQ(time_stretch(input, speed, kRate).size(),
                static_cast<size_t>(std::llround(static_cast<double>(length) / speed)))
          << length << " samples at speed " << speed;
    }
  }
  EXPECT_TRUE(time_stretch({}, 2.0, kRate).empty());
}

TEST(TimeStretch, AToneKeepsItsPitchAndLevel) {
  for (double hz : {110.0, 220.0, 440.0}) {
    const std::vector<float> input = tone(size_t{2} * kRate, hz);
    for (double speed : kSpeeds) {
      SCOPED_TRACE(testing::Message() << hz << " Hz at speed " << speed);
      const std::vector<float> output = middle(time_stretch(input, speed, kRate));
      EXPECT_NEAR(zero_crossing_hz(output), hz, hz * 0.005);
      EXPECT_NEAR(rms(output), rms(middle(input)), 0.05 * rms(middle(input)));
      // A join out of phase would jump; matched joins move no faster than the tone itself.
      EXPECT_LE(max_step(output), 1.05 * max_step(input));
    }
  }
}

TEST(TimeStretch, AHarmonicVoiceKeepsItsFundamental) {
  // A vowel-like sound: 150 Hz with its harmonics falling off, and the pitch sliding by 10%.
  std::vector<float> input(size_t{3} * kRate);
  double phase = 0.0;
  for (size_t i = 0; i < input.size(); ++i) {
    const double hz = 150.0 * (1.0 + 0.1 * static_cast<double>(i) / static_cast<double>(input.size()));
    phase += 2 * std::numbers::pi * hz / kRate;
    input[i] = static_cast<float>(0.4 * std::sin(phase) + 0.2 * std::sin(2 * phase) + 0.1 * std::sin(3 * phase));
  }
  for (double speed : {0.5, 2.0}) {
    SCOPED_TRACE(speed);
    const std::vector<float> output = time_stretch(input, speed, kRate);
    // The middle of the output holds the middle of the input: the same pitch there (157.5 Hz).
    const size_t at = output.size() / 2, span = static_cast<size_t>(0.1 * kRate);
    const std::vector<float> piece(output.begin() + static_cast<std::ptrdiff_t>(at - span / 2),
                                   output.begin() + static_cast<std::ptrdiff_t>(at + span / 2));
    EXPECT_NEAR(zero_crossing_hz(piece), 157.5, 2.0);
    EXPECT_LE(max_step(output), 1.1 * max_step(input));
  }
}

TEST(TimeStretch, SpeedOneIsTheIdentity) {
  const std::vector<float> input = tone(5000, 330.0);
  EXPECT_EQ(time_stretch(input, 1.0, kRate), input);
}

TEST(TimeStretch, BadArgumentsNameTheField) {
  const std::vector<float> input = tone(100, 330.0);
  for (double speed : {0.2, 4.5, std::nan(""), 0.0}) {
    try {
      time_stretch(input, speed, kRate);
      ADD_FAILURE() << "speed " << speed << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("speed must be in [0.25, 4]"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(time_stretch(input, 2.0, 0), Error);
}

}  // namespace
}  // namespace omni::media
