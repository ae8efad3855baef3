//! What one look at a node's networks reads once for all of them: the host's links (one
//! dump, not three per network; each bridge's ports are counted from it), one nf_tables socket, and, in a long-running `academy
//! watch`, each store as it last read it. A scrape of 100 networks of 250 addresses
//! read every reservation and holder index again each time (70,000 opens, about 0.8 s);
//! a store's reservations never change in place (see `StoreStamp`), so the watch reads
//! a store again only once its directories changed, and a steady node's scrape opens no
//! reservation at all.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::SystemTime;

use crate::cni::Result;
use crate::ipam::store::{Reservation, StoreDir, StoreStamp};
use crate::netlink::{Link, LinkKind, Netlink, NftablesOnDemand};

pub struct NodeLook<'a> {
    /// The host's links, or why they could not be dumped.
    pub links: std::result::Result<Vec<Link>, String>,
    pub nft: NftablesOnDemand,
    pub stores: &'a mut StoreCache,
}

impl<'a> NodeLook<'a> {
    pub fn now(stores: &'a mut StoreCache) -> NodeLook<'a> {
        NodeLook {
            links: Netlink::open()
                .and_then(|mut nl| nl.links())
                .map_err(|e| crate::cni::Error::from(e).to_string()),
            nft: NftablesOnDemand::default(),
            stores,
        }
    }

    /// The ports of bridge `name` in the links dumped (no further request); None when
    /// there is no such bridge here or the links could not be read.
    pub fn bridge_ports(&self, name: &str) -> Option<usize> {
        let links = self.links.as_ref().ok()?;
        let bridge = links
            .iter()
            .find(|l| l.name == name && l.kind == LinkKind::Bridge)?;
        Some(
            links
                .iter()
                .filter(|l| l.controller == Some(bridge.index))
                .count(),
        )
    }
}

/// Stores as last read, by directory; empty for a one-shot command (`academy status`).
#[derive(Default)]
pub struct StoreCache {
    keep: bool,
    stores: HashMap<PathBuf, StoreRead>,
}

/// A store's reservations and the holder indexes' answers for them.
#[derive(Clone)]
pub struct StoreRead {
    stamp: Option<StoreStamp>,
    pub reservations: Vec<Reservation>,
    /// `StoreDir::index_of` of each reservation looked up so far.
    index: HashMap<IpAddr, Option<Option<String>>>,
}

impl StoreCache {
    /// A cache that keeps what it read between looks (the watch's).
    pub fn kept() -> StoreCache {
        StoreCache {
            keep: true,
            stores: HashMap::new(),
        }
    }

    /// The store's reservations, read again unless its stamp vouches for the last read.
    pub fn read(&mut self, store: &StoreDir) -> Result<&mut StoreRead> {
        let path = store.path().to_path_buf();
        // Taken before reading: a change while reading moves it, so the next look reads
        // again.
        let stamp = store.stamp()?;
        let fresh = self
            .stores
            .get(&path)
            .is_some_and(|r| r.stamp == Some(stamp));
        if !fresh {
            // A stamp vouches only for a reading made once it had settled: a change in
            // the same clock tick as the one before keeps the directory's mtime.
            let vouches = self.keep && stamp.settled(SystemTime::now());
            let read = StoreRead {
                stamp: vouches.then_some(stamp),
                reservations: store.reservations()?,
                index: HashMap::new(),
            };
            self.stores.insert(path.clone(), read);
        }
        Ok(self.stores.get_mut(&path).expect("just read"))
    }

    /// Forgets stores not looked at since `retain` was last given them (a network
    /// removed from the conf dir).
    pub fn retain(&mut self, looked: &[PathBuf]) {
        self.stores.retain(|p, _| looked.contains(p));
    }
}

impl StoreRead {
    pub fn index_of(
        &mut self,
        store: &StoreDir,
        r: &Reservation,
    ) -> Result<Option<Option<String>>> {
        if let Some(known) = self.index.get(&r.address) {
            return Ok(known.clone());
        }
        let found = store.index_of(r)?;
        self.index.insert(r.address, found.clone());
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, SystemTime};

    use super::*;

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn store(tag: &str) -> Dir {
        let path = std::env::temp_dir().join(format!("academy-look-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(path.join("holders")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
        Dir(path)
    }

    fn reserve(dir: &Dir, address: &str, cid: &str) {
        fs::write(dir.0.join(address), format!("{cid}\r\neth0")).unwrap();
        fs::write(
            dir.0.join("holders").join(format!("{cid}:eth0")),
            format!("{address}\n"),
        )
        .unwrap();
    }

    /// Sets both directories' mtimes to one time long past, the same each call.
    fn settle(dir: &Dir) {
        let then = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for d in [dir.0.clone(), dir.0.join("holders")] {
            fs::File::open(&d).unwrap().set_modified(then).unwrap();
        }
    }

    fn holders(cache: &mut StoreCache, dir: &Dir) -> Vec<String> {
        let store = StoreDir::open(&dir.0).unwrap().unwrap();
        let read = cache.read(&store).unwrap();
        let all = read.reservations.clone();
        // An index is read once per reservation and kept with it: the first holder's
        // always names its address, a holder changed in place (by hand) has none.
        for r in &all {
            let indexed = read.index_of(&store, r).unwrap().is_some();
            assert_eq!(indexed, r.container_id != "b", "{r:?}");
        }
        all.iter().map(|r| r.container_id.clone()).collect()
    }

    #[test]
    fn a_kept_read_lasts_while_the_store_is_unchanged_and_no_longer() {
        let dir = store("kept");
        reserve(&dir, "10.0.0.2", "a");
        settle(&dir);
        let mut cache = StoreCache::kept();
        assert_eq!(holders(&mut cache, &dir), ["a"]);
        // A file changed in place (academy never does) shows the read is kept ...
        fs::write(dir.0.join("10.0.0.2"), "b\r\neth0").unwrap();
        settle(&dir);
        assert_eq!(holders(&mut cache, &dir), ["a"]);
        // ... and any name made or removed ends it.
        reserve(&dir, "10.0.0.3", "c");
        assert_eq!(holders(&mut cache, &dir), ["b", "c"]);
        fs::remove_file(dir.0.join("10.0.0.3")).unwrap();
        assert_eq!(holders(&mut cache, &dir), ["b"]);
    }

    #[test]
    fn a_read_of_a_store_changed_within_the_second_is_not_kept() {
        let dir = store("racy");
        reserve(&dir, "10.0.0.2", "a");
        let mut cache = StoreCache::kept();
        assert_eq!(holders(&mut cache, &dir), ["a"]);
        // Changed in place with the directories' mtimes as they were: a read taken
        // while they were fresh vouches for nothing.
        fs::write(dir.0.join("10.0.0.2"), "b\r\neth0").unwrap();
        assert_eq!(holders(&mut cache, &dir), ["b"]);
    }

    #[test]
    fn a_one_shot_look_reads_every_time() {
        let dir = store("oneshot");
        reserve(&dir, "10.0.0.2", "a");
        settle(&dir);
        let mut cache = StoreCache::default();
        assert_eq!(holders(&mut cache, &dir), ["a"]);
        fs::write(dir.0.join("10.0.0.2"), "b\r\neth0").unwrap();
        settle(&dir);
        assert_eq!(holders(&mut cache, &dir), ["b"]);
    }
}
