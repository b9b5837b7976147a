// Implementation of train/imagenet_folder.h: listing ILSVRC12-style folders
// and the list files of the caffe metadata.
#include "train/imagenet_folder.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/logger.h"

namespace spire {
namespace {

namespace fs = std::filesystem;

bool is_dir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

bool is_file(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Sorted names of the entries of `dir` that are folders (want_dirs) or
// regular files.
std::vector<std::string> list_dir(const std::string& dir, bool want_dirs, const char* who) {
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  SPIRE_CHECK(!ec, who, ": cannot list ", dir, ": ", ec.message());
  for (; it != end; it.increment(ec)) {
    SPIRE_CHECK(!ec, who, ": error listing ", dir, ": ", ec.message());
    std::error_code ec2;
    const bool d = it->is_directory(ec2);
    const bool f = !d && it->is_regular_file(ec2);
    if ((want_dirs && d) || (!want_dirs && f)) names.push_back(it->path().filename().string());
  }
  SPIRE_CHECK(!ec, who, ": error listing ", dir, ": ", ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

bool is_image_name(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) return false;
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "jpeg" || ext == "jpg" || ext == "png";
}

// The lines of a text file without trailing '\r' (Windows line ends).
std::vector<std::string> read_lines(const std::string& path, const char* who) {
  std::ifstream f(path);
  SPIRE_CHECK(static_cast<bool>(f), who, ": cannot open ", path, ": ", std::strerror(errno));
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  SPIRE_CHECK(!f.bad(), who, ": error reading ", path);
  return lines;
}

// synsets.txt: the first word of each non-empty line, line order = label order.
std::vector<std::string> read_synsets(const std::string& path, const char* who) {
  std::vector<std::string> out;
  std::map<std::string, size_t> seen;
  const std::vector<std::string> lines = read_lines(path, who);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::istringstream is(lines[i]);
    std::string wnid;
    if (!(is >> wnid)) continue;
    auto [at, fresh] = seen.emplace(wnid, i + 1);
    SPIRE_CHECK(fresh, who, ": ", path, ":", i + 1, ": synset ", wnid, " already on line ",
                at->second);
    out.push_back(wnid);
  }
  SPIRE_CHECK(!out.empty(), who, ": ", path, " lists no synsets");
  return out;
}

}  // namespace

ILSVRC12Files::ILSVRC12Files(const std::string& dir, const std::string& name,
                             ILSVRC12Options options)
    : options_(std::move(options)),
      order_(options_.shuffle.value_or(name == "train"), options_.seed) {
  const char* who = "ILSVRC12Files";
  SPIRE_CHECK(!name.empty() && name.find('/') == std::string::npos, who,
              ": the split name must be a folder name such as \"train\" or \"val\", got \"", name,
              "\"");
  const std::string root = dir + "/" + name;
  SPIRE_CHECK(is_dir(root), who, ": ", root, " is not a folder (expected ", dir,
              "/train/<wnid>/*.JPEG and ", dir, "/val/)");
  const std::string meta = options_.meta_dir.empty() ? dir : options_.meta_dir;

  const std::vector<std::string> classes = list_dir(root, /*want_dirs=*/true, who);
  const std::string synsets_path = meta + "/synsets.txt";
  if (is_file(synsets_path)) {
    synsets_ = read_synsets(synsets_path, who);
  } else if (is_dir(dir + "/train")) {
    synsets_ = name == "train" ? classes : list_dir(dir + "/train", true, who);
  } else {
    synsets_ = classes;
  }

  if (!classes.empty()) {
    // Per-class folders.
    std::map<std::string, int64_t> label_of;
    for (size_t i = 0; i < synsets_.size(); ++i) label_of[synsets_[i]] = static_cast<int64_t>(i);
    for (const std::string& c : classes) {
      auto it = label_of.find(c);
      SPIRE_CHECK(it != label_of.end(), who, ": class folder ", root, "/", c,
                  " is not a known synset (",
                  is_file(synsets_path) ? synsets_path : std::string("the folders of ") + dir + "/train",
                  " has ", synsets_.size(), ")");
      for (const std::string& f : list_dir(root + "/" + c, /*want_dirs=*/false, who)) {
        if (!is_image_name(f)) continue;
        paths_.push_back(root + "/" + c + "/" + f);
        labels_.push_back(it->second);
      }
    }
  } else {
    // Flat: "<file> <label>" lines of meta/<name>.txt.
    SPIRE_CHECK(name != "train", who, ": ", root,
                " has no class folders (expected train/<wnid>/*.JPEG)");
    const std::string list = meta + "/" + name + ".txt";
    SPIRE_CHECK(is_file(list), who, ": ", root, " has no class folders, and there is no ", list,
                " (\"<file name> <label>\" per line) to label its files");
    const std::vector<std::string> lines = read_lines(list, who);
    for (size_t i = 0; i < lines.size(); ++i) {
      std::istringstream is(lines[i]);
      std::string file, extra;
      int64_t label = -1;
      if (!(is >> file)) continue;  // blank line
      SPIRE_CHECK(static_cast<bool>(is >> label) && !(is >> extra), who, ": ", list, ":", i + 1,
                  ": expected \"<file name> <label>\", got \"", lines[i], "\"");
      SPIRE_CHECK(label >= 0 && (synsets_.empty() || label < static_cast<int64_t>(synsets_.size())),
                  who, ": ", list, ":", i + 1, ": label ", label, " is out of range",
                  synsets_.empty() ? std::string(" (negative)")
                                   : str_cat(" (", synsets_.size(), " synsets)"));
      const std::string path = root + "/" + file;
      SPIRE_CHECK(is_file(path), who, ": ", list, ":", i + 1, " lists ", file, ", but ", path,
                  " does not exist");
      paths_.push_back(path);
      labels_.push_back(label);
    }
  }
}

void ILSVRC12Files::set_next_epoch(int64_t e) { order_.set_next_epoch(e, name()); }

void ILSVRC12Files::begin_epoch_impl() { order_.begin(static_cast<int64_t>(paths_.size())); }

int64_t ILSVRC12Files::next_index() { return order_.next(); }

bool ILSVRC12Files::next_impl(Datapoint& dp) {
  const int64_t i = next_index();
  if (i < 0) return false;
  dp = {string_to_tensor(paths_[static_cast<size_t>(i)]),
        Tensor::scalar<int64_t>(labels_[static_cast<size_t>(i)])};
  return true;
}

ILSVRC12::ILSVRC12(const std::string& dir, const std::string& name, ILSVRC12Options options)
    : ILSVRC12Files(dir, name, options),
      decoder_(0, options.skip_bad_images, options.decode),
      where_(dir + "/" + name) {}

void ILSVRC12::begin_epoch_impl() {
  ILSVRC12Files::begin_epoch_impl();
  skipped_pass_ = 0;
}

bool ILSVRC12::next_impl(Datapoint& dp) {
  for (;;) {
    const int64_t i = next_index();
    if (i < 0) {
      if (skipped_pass_ > 0)
        logger::warn("ILSVRC12 (", where_, "): skipped ", skipped_pass_, " bad image",
                     skipped_pass_ == 1 ? "" : "s", " of ", size(), " in this pass (",
                     decoder_.skipped(), " in all)");
      return false;
    }
    const size_t k = static_cast<size_t>(i);
    std::optional<Datapoint> out =
        decoder_({string_to_tensor(paths()[k]), Tensor::scalar<int64_t>(labels()[k])});
    if (out) {
      dp = std::move(*out);
      return true;
    }
    ++skipped_pass_;
  }
}

}  // namespace spire
