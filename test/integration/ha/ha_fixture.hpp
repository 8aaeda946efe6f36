#pragma once
/// @file
/// The HA tests' fixture (label "ha"): a 3-member etcd and three controllers
/// on loopback (ha_group.hpp), started before each test with one of them
/// leading; every process is killed after it, its log printed when the test
/// failed.

#include <memory>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "integration/ha/ha_group.hpp"

namespace astraeus::itest {

class ha_test : public ::testing::Test {
protected:
  /// `tag`: the name of the test's temporary folder.
  explicit ha_test(const std::string& tag) : dir_(tag) {
  }

  void SetUp() override {
    group_ = std::make_unique<ha_group>(dir_.path());
    ASSERT_TRUE(group_->ready_etcd()) << "etcd did not start";
    ASSERT_TRUE(group_->start_all()) << "the first controller made no keys in 15 s";
    leader_ = group_->wait_leader(20s);
    ASSERT_TRUE(leader_) << "no controller leads after 20 s";
    // The standbys started after the first controller made the keys.
    for (size_t i = 0; i < group_->size(); ++i)
      ASSERT_TRUE(group_->wait_listening(i, 15s))
        << "controller " << i << "'s gate or API does not listen after 15 s";
  }

  void TearDown() override {
    group_->end(HasFailure());
  }

  temp_dir dir_;
  std::unique_ptr<ha_group> group_;
  /// The controller that leads after SetUp.
  std::optional<size_t> leader_;
};

} // namespace astraeus::itest
