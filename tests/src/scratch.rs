//! Files a test makes: a folder of its own under the system's temporary directory, and
//! copies of the import examples (`testdata/import`) in it, since the importer writes its
//! state file beside its input and the repository is not the place for one.

use std::path::{Path, PathBuf};

/// A new folder `rivulet-NAME-<uuid>` under the temporary directory.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("rivulet-{name}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A copy of `testdata/import/NAME` in `dir`.
pub fn import_example(dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    std::fs::copy(crate::repo_root().join("testdata/import").join(name), &to)
        .unwrap_or_else(|e| panic!("copying testdata/import/{name}: {e}"));
    to
}
