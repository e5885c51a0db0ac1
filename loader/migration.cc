#include "loader/migration.h"

namespace egressd {

const std::vector<const Migration*>& Migrations() {
  static const std::vector<const Migration*> all = {
      &kMigrateResolvedV1,
      &kMigrateStatsV2,
      &kMigrateStatsV1,
      &kMigrateSockV1,
      &kMigrateTcStatsV1,
  };
  return all;
}

}  // namespace egressd
