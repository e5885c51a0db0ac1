#include "userspace/dns/qname_key.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <openssl/core_names.h>
#include <openssl/evp.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"

namespace egressd::dns {

// A context keyed once; each Id() works on a copy (EVP_MAC_CTX_dup), so the
// keyed one is only read and Id() may run on several threads.
struct QnameKey::Mac {
  EVP_MAC* mac = nullptr;
  EVP_MAC_CTX* keyed = nullptr;
  ~Mac() {
    EVP_MAC_CTX_free(keyed);
    EVP_MAC_free(mac);
  }
};

QnameKey::QnameKey(std::unique_ptr<Mac> mac) : mac_(std::move(mac)) {}
QnameKey::~QnameKey() = default;

absl::StatusOr<std::shared_ptr<const QnameKey>> QnameKey::FromBytes(const Bytes& key) {
  auto m = std::make_unique<Mac>();
  m->mac = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
  if (!m->mac) return absl::InternalError("OpenSSL has no SIPHASH MAC (EVP_MAC_fetch)");
  m->keyed = EVP_MAC_CTX_new(m->mac);
  if (!m->keyed) return absl::ResourceExhaustedError("EVP_MAC_CTX_new for SIPHASH");
  size_t size = 8;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size), OSSL_PARAM_construct_end()};
  if (EVP_MAC_init(m->keyed, key.data(), key.size(), params) != 1) {
    return absl::InternalError("EVP_MAC_init of SIPHASH with a 16-byte key failed");
  }
  return std::shared_ptr<const QnameKey>(new QnameKey(std::move(m)));
}

uint32_t QnameKey::Id(std::string_view name) const {
  EVP_MAC_CTX* c = EVP_MAC_CTX_dup(mac_->keyed);
  uint8_t tag[8] = {};
  size_t len = 0;
  const bool ok = c && EVP_MAC_update(c, reinterpret_cast<const uint8_t*>(name.data()), name.size()) == 1 &&
                  EVP_MAC_final(c, tag, &len, sizeof(tag)) == 1 && len == sizeof(tag);
  EVP_MAC_CTX_free(c);
  // 0 is "not known": it keeps nothing and adopts nothing (fails closed).
  if (!ok) return 0;
  const uint32_t id = static_cast<uint32_t>(tag[0]) | static_cast<uint32_t>(tag[1]) << 8 |
                      static_cast<uint32_t>(tag[2]) << 16 | static_cast<uint32_t>(tag[3]) << 24;
  return id == 0 ? 1 : id;
}

namespace {

absl::StatusOr<QnameKey::Bytes> ReadKey(int fd, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return ErrnoStatus(errno, absl::StrCat("stat ", path));
  if (!S_ISREG(st.st_mode) || st.st_size != static_cast<off_t>(QnameKey::kBytes)) {
    return absl::FailedPreconditionError(absl::StrCat("the DNS question-name key ", path, " is not a ",
                                                      QnameKey::kBytes, "-byte file (", st.st_size,
                                                      " bytes): remove it to have a new one made"));
  }
  QnameKey::Bytes key{};
  size_t got = 0;
  while (got < key.size()) {
    ssize_t n = read(fd, key.data() + got, key.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("read ", path));
    if (n == 0) return absl::FailedPreconditionError(absl::StrCat("the DNS question-name key ", path, " is short"));
    got += static_cast<size_t>(n);
  }
  return key;
}

absl::StatusOr<QnameKey::Bytes> LoadOrCreateBytes(const std::string& path) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
      UniqueFd f(fd);
      return ReadKey(fd, path);
    }
    if (errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("open ", path));
    // None yet: a new key, written whole under a name of our own and linked
    // in, so no reader ever sees a partial key and the first link wins.
    QnameKey::Bytes key{};
    if (getrandom(key.data(), key.size(), 0) != static_cast<ssize_t>(key.size())) {
      return ErrnoStatus(errno, "getrandom for the DNS question-name key");
    }
    uint32_t tag = 0;
    std::memcpy(&tag, key.data(), sizeof(tag));  // two threads of one process race too
    const std::string tmp = absl::StrCat(path, ".new.", getpid(), ".", tag);
    int w = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (w < 0) return ErrnoStatus(errno, absl::StrCat("create ", tmp));
    UniqueFd wf(w);
    const bool written = write(w, key.data(), key.size()) == static_cast<ssize_t>(key.size());
    const int werr = errno;
    wf = UniqueFd();
    if (!written) {
      unlink(tmp.c_str());
      return ErrnoStatus(werr, absl::StrCat("write ", tmp));
    }
    const int linked = link(tmp.c_str(), path.c_str());
    const int lerr = errno;
    unlink(tmp.c_str());
    if (linked == 0) return key;
    if (lerr != EEXIST) return ErrnoStatus(lerr, absl::StrCat("link ", tmp, " to ", path));
    // Another process linked its key first: read that one.
  }
  return absl::UnavailableError(absl::StrCat("the DNS question-name key ", path, " came and went"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const QnameKey>> QnameKey::LoadOrCreate(const std::string& path) {
  EGR_ASSIGN_OR_RETURN(Bytes key, LoadOrCreateBytes(path));
  return FromBytes(key);
}

}  // namespace egressd::dns
