// ImageNet-style folders of JPEG/PNG files as DataFlows (tensorpack's
// dataset.ILSVRC12Files and dataset.ILSVRC12): ILSVRC12Files yields {path,
// label} (the path as string_to_tensor, train/image_io.h), to be decoded in
// parallel by MultiThreadMapData with ImageFileDecoder; ILSVRC12 decodes in
// the DataFlow itself and yields {image f32 [H, W, 3] BGR 0..255, label i64}.
// Augment the images with train/imgaug.h.
//
// Layout (the ILSVRC12 release, as tensorpack reads it):
//   dir/train/<wnid>/*.JPEG        one folder per class
//   dir/val/*.JPEG                 flat, labels from meta_dir/val.txt, or
//   dir/val/<wnid>/*.JPEG          per class, like train
//   meta_dir/synsets.txt           optional: one WNID per line, line i = label i
//   meta_dir/val.txt               for a flat split: "<file name> <label>" per line
// (meta_dir defaults to dir; these are the caffe_ilsvrc12 metadata files).
// Labels are the line numbers of synsets.txt, or, without it, the positions
// of the class folder names of dir/train sorted by name (of dir/<name> when
// there is no dir/train). A split with at least one subfolder is read per
// class: every file ending in .jpeg, .jpg or .png (any case) in each class
// folder, folders and files in name order; a class folder that is not a
// known synset is an error. A flat split is read in the order of its
// <name>.txt, every listed file must exist. Unreadable folders, a missing or
// malformed list file and a label outside the synsets throw spire::Error
// naming the file (and line).
//
// Order: as DataFromList, epoch e visits the list in shuffled_indices(n,
// seed, e) order (or in list order without shuffle; by default only "train"
// is shuffled, as in tensorpack); set_next_epoch() resumes at an epoch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/dataflow.h"
#include "train/image_io.h"

namespace spire {

struct ILSVRC12Options {
  /// Where synsets.txt and <name>.txt are; empty: `dir`.
  std::string meta_dir;
  /// Shuffle each epoch; unset: only the "train" split (tensorpack's default).
  std::optional<bool> shuffle;
  uint64_t seed = 0;
  /// ILSVRC12 only: skip (and count, and log) images that cannot be read or
  /// decoded instead of throwing; the count of a pass is logged at its end.
  bool skip_bad_images = false;
  /// ILSVRC12 only: how images are decoded (BGR by default).
  ImageDecodeOptions decode;
};

/// The files of split `name` ("train", "val", ...) of an ILSVRC12-style
/// folder `dir`: datapoints {path (i32 [len], string_to_tensor), label i64
/// scalar}. Decode them with ImageFileDecoder (train/image_io.h), e.g. in a
/// MultiThreadMapData.
class ILSVRC12Files : public DataFlow {
 public:
  ILSVRC12Files(const std::string& dir, const std::string& name, ILSVRC12Options options = {});
  bool has_size() const override { return true; }
  int64_t size() const override { return static_cast<int64_t>(paths_.size()); }
  std::string name() const override { return "ILSVRC12Files"; }

  /// The WNIDs in label order (empty for a flat split without synsets.txt
  /// and without dir/train).
  const std::vector<std::string>& synsets() const { return synsets_; }
  /// Every file of the split with its label, in list (unshuffled) order.
  const std::vector<std::string>& paths() const { return paths_; }
  const std::vector<int64_t>& labels() const { return labels_; }

  /// The epoch the next begin_epoch() starts (0 after construction); set it
  /// to resume at epoch `e` with the order it would have had.
  int64_t next_epoch() const { return order_.next_epoch(); }
  bool can_set_next_epoch() const override { return true; }
  void set_next_epoch(int64_t e) override;

 protected:
  void begin_epoch_impl() override;
  bool next_impl(Datapoint& dp) override;
  /// The next (path index) of this epoch, or -1 at its end.
  int64_t next_index();
  const ILSVRC12Options& options() const { return options_; }

 private:
  ILSVRC12Options options_;
  std::vector<std::string> synsets_;
  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
  EpochOrder order_;
};

/// ILSVRC12Files that decodes each image (ImageFileDecoder with the options'
/// decode settings): datapoints {image f32 [H, W, 3] (BGR) 0..255, label i64
/// scalar}. With skip_bad_images a bad image is skipped; size() then stays
/// the number of files (an upper bound, as MapData's).
class ILSVRC12 : public ILSVRC12Files {
 public:
  ILSVRC12(const std::string& dir, const std::string& name, ILSVRC12Options options = {});
  std::string name() const override { return "ILSVRC12"; }
  /// Images skipped in the current (or last finished) pass, and in all.
  int64_t skipped_this_pass() const { return skipped_pass_; }
  int64_t skipped_total() const { return decoder_.skipped(); }

 protected:
  void begin_epoch_impl() override;
  bool next_impl(Datapoint& dp) override;

 private:
  ImageFileDecoder decoder_;
  std::string where_;
  int64_t skipped_pass_ = 0;
};

}  // namespace spire
