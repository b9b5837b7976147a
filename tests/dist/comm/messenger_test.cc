// Messenger::receive_watched: a wait with stall warnings and an optional
// limit, on the in-process LocalMessageHub (dist/comm/messenger.h).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "dist/comm/messenger.h"

namespace spire {
namespace {

// An endpoint of a LocalMessageHub whose long waits warn every `every` s.
class QuickStallChecks : public dist::Messenger {
 public:
  QuickStallChecks(std::shared_ptr<dist::Messenger> inner, double every) : inner_(std::move(inner)), every_(every) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  void send(int to, int tag, std::vector<char> data) override { inner_->send(to, tag, std::move(data)); }
  std::optional<dist::Message> receive(int from, int tag, double timeout_seconds) override {
    ++receives;
    return inner_->receive(from, tag, timeout_seconds);
  }
  void announce_failure(const std::string& why) override { inner_->announce_failure(why); }
  double stall_check_seconds() const override { return every_; }
  std::string peer_finished(int rank) override {
    return rank == finished ? "rank " + std::to_string(rank) + " finished" : std::string();
  }
  int receives = 0;
  int finished = -1;  // the rank peer_finished() names

 private:
  std::shared_ptr<dist::Messenger> inner_;
  double every_;
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Messenger, AWatchedReceiveWarnsWhileItWaitsAndEndsAtItsLimit) {
  dist::LocalMessageHub hub(2);
  QuickStallChecks m(hub.endpoint(0), 0.05);
  const auto t0 = std::chrono::steady_clock::now();
  ::testing::internal::CaptureStderr();
  const auto none = m.receive_watched(1, 7, 0.3, [] { return std::string("rank 1's answer"); });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(none);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300));
  // Waits of 50 ms, each but the last followed by a warning naming what it waits for.
  EXPECT_GE(count(err, "rank 0 has waited "), 4u) << err;
  EXPECT_EQ(count(err, "rank 0 has waited "), count(err, " s for rank 1's answer; ")) << err;
  EXPECT_NE(err.find("(up to 0.3 s)"), std::string::npos) << err;
  EXPECT_GE(m.receives, 5);
}

TEST(Messenger, AWatchedReceiveWithoutALimitWaitsForTheMessageWarningMeanwhile) {
  dist::LocalMessageHub hub(2);
  QuickStallChecks m(hub.endpoint(0), 0.05);
  std::thread peer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    hub.endpoint(1)->send(0, 7, {'h', 'i'});
  });
  ::testing::internal::CaptureStderr();
  const auto got = m.receive_watched(1, 7, 0, [] { return std::string("rank 1's answer"); });
  const std::string err = ::testing::internal::GetCapturedStderr();
  peer.join();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->source, 1);
  EXPECT_EQ(std::string(got->data.begin(), got->data.end()), "hi");
  // The first 50 ms wait cannot have had the message (sent after 200 ms).
  EXPECT_GE(count(err, " s for rank 1's answer; "), 1u) << err;
  EXPECT_NE(err.find("(no time limit)"), std::string::npos) << err;
}

TEST(Messenger, AWatchedReceiveEndsAtOnceWhenAnotherRankFailed) {
  dist::LocalMessageHub hub(2);
  QuickStallChecks m(hub.endpoint(0), 0.05);
  std::thread peer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    hub.endpoint(1)->announce_failure("boom");
  });
  try {
    m.receive_watched(1, 7, 0, [] { return std::string("rank 1's answer"); });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 failed: boom"), std::string::npos) << e.what();
  }
  peer.join();
}

TEST(Messenger, AWatchedReceiveEndsWhenARankItNeedsFinished) {
  dist::LocalMessageHub hub(3);
  QuickStallChecks m(hub.endpoint(0), 60);
  m.finished = 2;  // (rank 2 finished; rank 1 did not)
  // Waiting for rank 1 only: rank 2's end does not matter (the limit ends it).
  EXPECT_FALSE(m.receive_watched(-1, 7, 0.2, [] { return std::string("a request"); },
                                 [] { return std::vector<int>{1}; }));
  // Waiting for ranks 1 and 2: rank 2's end ends the wait at once.
  const auto t0 = std::chrono::steady_clock::now();
  try {
    // (A limit, so that a regression fails rather than hangs.)
    m.receive_watched(-1, 7, 20, [] { return std::string("a request from rank(s) 1, 2"); },
                      [] { return std::vector<int>{1, 2}; });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 waits for a request from rank(s) 1, 2, but rank 2 finished"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

}  // namespace
}  // namespace spire
