//! The runtime records (runtime.rs): written only when there is something to record,
//! named by the index's marker, gone with the attachment whichever way it goes.

use super::*;

const RECORD: &[u8] =
    br#"{"version":1,"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}"#;

fn recording(t: &TempDir, record: Option<&[u8]>) -> Store {
    open(t).recording(record.map(<[u8]>::to_vec))
}

fn survey(s: &Store) -> StoreDir {
    StoreDir::open(s.dir()).unwrap().unwrap()
}

#[test]
fn a_record_is_written_named_and_released_with_its_attachment() {
    let t = TempDir::new("rec");
    let s = recording(&t, Some(RECORD));
    let p = pool("10.98.0.0/24", "10.98.0.1");
    let a = s.reserve(&h("c1"), &p).unwrap();
    s.write_record(&h("c1")).unwrap();
    assert_eq!(
        read(&s, "holders/c1:eth0"),
        format!("{a}\nruntime recorded\n")
    );
    assert_eq!(read(&s, "runtime/c1:eth0").as_bytes(), RECORD);
    assert_eq!(
        survey(&s).runtime_of(&h("c1")).unwrap(),
        Runtime::Record(RECORD.to_vec())
    );
    // Another Store (DEL's) finds it through the index alone.
    open(&t).release(&h("c1")).unwrap();
    assert!(!s.dir().join("runtime/c1:eth0").exists());
    assert!(!s.dir().join("holders/c1:eth0").exists());
    assert_eq!(
        fs::read_dir(s.dir().join("runtime")).unwrap().count(),
        0,
        "no temp file left"
    );
}

#[test]
fn nothing_to_record_costs_no_file_and_reads_apart_from_an_older_index() {
    let t = TempDir::new("none");
    let s = recording(&t, None);
    let p = pool("10.98.0.0/24", "10.98.0.1");
    s.reserve(&h("c1"), &p).unwrap();
    s.write_record(&h("c1")).unwrap();
    assert!(!s.dir().join("runtime").exists());
    assert_eq!(survey(&s).runtime_of(&h("c1")).unwrap(), Runtime::Nothing);
    // An index an older academy wrote: no marker.
    write(&s, "10.98.0.9", "old\r\neth0");
    write(&s, "holders/old:eth0", "10.98.0.9\n");
    assert_eq!(
        survey(&s).runtime_of(&h("old")).unwrap(),
        Runtime::Unrecorded
    );
    // Its next ADD (the address already held) records it.
    let s = recording(&t, Some(RECORD));
    assert_eq!(s.reserve(&h("old"), &p).unwrap(), ip("10.98.0.9"));
    s.write_record(&h("old")).unwrap();
    assert_eq!(
        survey(&s).runtime_of(&h("old")).unwrap(),
        Runtime::Record(RECORD.to_vec())
    );
    // An ADD again without ports takes the record away.
    let s = recording(&t, None);
    s.reserve(&h("old"), &p).unwrap();
    assert!(!s.dir().join("runtime/old:eth0").exists());
    assert_eq!(survey(&s).runtime_of(&h("old")).unwrap(), Runtime::Nothing);
}

#[test]
fn gc_and_reclaim_take_the_records_of_what_they_free() {
    let t = TempDir::new("gc");
    let p = pool("10.98.0.0/24", "10.98.0.1");
    for id in ["keep", "gone", "reclaimed"] {
        let s = recording(&t, Some(RECORD));
        s.reserve(&h(id), &p).unwrap();
        s.write_record(&h(id)).unwrap();
    }
    // A kill between a record and its index: a record no index names.
    write(&open(&t), "runtime/orphan:eth0", "{}");
    let s = open(&t);
    let valid: HashSet<(String, String)> = [("keep", "eth0"), ("reclaimed", "eth0")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let report = s.gc(&valid);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let mut left: Vec<String> = fs::read_dir(s.dir().join("runtime"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["keep:eth0", "reclaimed:eth0"]);
    // Reclaim: the reservation unlinked, then the index with its record.
    let dir = survey(&s);
    fs::remove_file(
        s.dir()
            .join(read(&s, "holders/reclaimed:eth0").lines().next().unwrap()),
    )
    .unwrap();
    dir.drop_index_if_unused(&h("reclaimed")).unwrap();
    assert!(!s.dir().join("runtime/reclaimed:eth0").exists());
    assert!(s.dir().join("runtime/keep:eth0").exists());
}
