//! Names of well-known ONC RPC programs and their procedures, as Wireshark
//! and `nfsstat` print them: NFS versions 2, 3 and 4 (RFC 1094, RFC 1813,
//! RFC 7530 / RFC 8881), MOUNT versions 1–3 (RFC 1094 App. A, RFC 1813
//! App. I), NLM versions 1–4 (the Open Group XNFS, RFC 1813 §6), NSM,
//! NFS_ACL and rpcbind / portmap (RFC 1833).
//!
//! A dissector's view: what a procedure number means for a display or a
//! statistics table. An unknown program, version or procedure has no name
//! (the caller prints the numbers).

/// The NFS program number.
pub const NFS_PROGRAM: u32 = 100003;
/// The MOUNT program number.
pub const MOUNT_PROGRAM: u32 = 100005;
/// The NLM (network lock manager) program number.
pub const NLM_PROGRAM: u32 = 100021;
/// The NSM (network status monitor) program number.
pub const NSM_PROGRAM: u32 = 100024;
/// The NFS_ACL side-band program number.
pub const NFS_ACL_PROGRAM: u32 = 100227;
/// The rpcbind / portmapper program number.
pub const RPCBIND_PROGRAM: u32 = 100000;

const NFS2: &[&str] = &[
    "NULL",
    "GETATTR",
    "SETATTR",
    "ROOT",
    "LOOKUP",
    "READLINK",
    "READ",
    "WRITECACHE",
    "WRITE",
    "CREATE",
    "REMOVE",
    "RENAME",
    "LINK",
    "SYMLINK",
    "MKDIR",
    "RMDIR",
    "READDIR",
    "STATFS",
];

const NFS3: &[&str] = &[
    "NULL",
    "GETATTR",
    "SETATTR",
    "LOOKUP",
    "ACCESS",
    "READLINK",
    "READ",
    "WRITE",
    "CREATE",
    "MKDIR",
    "SYMLINK",
    "MKNOD",
    "REMOVE",
    "RMDIR",
    "RENAME",
    "LINK",
    "READDIR",
    "READDIRPLUS",
    "FSSTAT",
    "FSINFO",
    "PATHCONF",
    "COMMIT",
];

const NFS4: &[&str] = &["NULL", "COMPOUND"];

const MOUNT: &[&str] = &[
    "NULL",
    "MNT",
    "DUMP",
    "UMNT",
    "UMNTALL",
    "EXPORT",
    "EXPORTALL",
];

const NLM: &[&str] = &[
    "NULL",
    "TEST",
    "LOCK",
    "CANCEL",
    "UNLOCK",
    "GRANTED",
    "TEST_MSG",
    "LOCK_MSG",
    "CANCEL_MSG",
    "UNLOCK_MSG",
    "GRANTED_MSG",
    "TEST_RES",
    "LOCK_RES",
    "CANCEL_RES",
    "UNLOCK_RES",
    "GRANTED_RES",
    "",
    "",
    "",
    "",
    "SHARE",
    "UNSHARE",
    "NM_LOCK",
    "FREE_ALL",
];

const NSM: &[&str] = &[
    "NULL",
    "STAT",
    "MON",
    "UNMON",
    "UNMON_ALL",
    "SIMU_CRASH",
    "NOTIFY",
];

const NFS_ACL: &[&str] = &[
    "NULL",
    "GETACL",
    "SETACL",
    "GETATTR",
    "ACCESS",
    "GETXATTRDIR",
];

const PMAP2: &[&str] = &["NULL", "SET", "UNSET", "GETPORT", "DUMP", "CALLIT"];

const RPCBIND: &[&str] = &[
    "NULL",
    "SET",
    "UNSET",
    "GETADDR",
    "DUMP",
    "CALLIT",
    "GETTIME",
    "UADDR2TADDR",
    "TADDR2UADDR",
    "GETVERSADDR",
    "INDIRECT",
    "GETADDRLIST",
    "GETSTAT",
];

/// The short name of a program (`NFS`, `MOUNT`, `NLM`, `NSM`, `NFS_ACL`,
/// `RPCBIND`), or `None`.
pub fn program_name(prog: u32) -> Option<&'static str> {
    Some(match prog {
        NFS_PROGRAM => "NFS",
        MOUNT_PROGRAM => "MOUNT",
        NLM_PROGRAM => "NLM",
        NSM_PROGRAM => "NSM",
        NFS_ACL_PROGRAM => "NFS_ACL",
        RPCBIND_PROGRAM => "RPCBIND",
        _ => return None,
    })
}

fn table(prog: u32, vers: u32) -> Option<&'static [&'static str]> {
    Some(match (prog, vers) {
        (NFS_PROGRAM, 2) => NFS2,
        (NFS_PROGRAM, 3) => NFS3,
        (NFS_PROGRAM, 4) => NFS4,
        (MOUNT_PROGRAM, 1..=3) => &MOUNT[..if vers == 3 { 6 } else { 7 }],
        (NLM_PROGRAM, 1..=3) => &NLM[..16],
        (NLM_PROGRAM, 4) => NLM,
        (NSM_PROGRAM, 1) => NSM,
        (NFS_ACL_PROGRAM, 2 | 3) => NFS_ACL,
        (RPCBIND_PROGRAM, 2) => PMAP2,
        (RPCBIND_PROGRAM, 3) => &RPCBIND[..9],
        (RPCBIND_PROGRAM, 4) => RPCBIND,
        _ => return None,
    })
}

/// The name of procedure `proc` of `prog` version `vers` (`GETATTR`,
/// `COMPOUND`, `MNT`, `LOCK`, …), or `None` when the program, the version
/// or the procedure is not known.
pub fn procedure_name(prog: u32, vers: u32, proc: u32) -> Option<&'static str> {
    let t = table(prog, vers)?;
    let name = *t.get(usize::try_from(proc).ok()?)?;
    (!name.is_empty()).then_some(name)
}

/// The procedure number of `name` in `prog` version `vers`
/// (case-insensitive), the inverse of [`procedure_name`].
pub fn procedure_number(prog: u32, vers: u32, name: &str) -> Option<u32> {
    let t = table(prog, vers)?;
    let i = t
        .iter()
        .position(|n| !n.is_empty() && n.eq_ignore_ascii_case(name))?;
    u32::try_from(i).ok()
}

/// A program and version as Wireshark titles its tables: `NFSv3`,
/// `MOUNTv3`, `NLMv4`, or `100099v1` for an unknown program.
pub fn program_version_label(prog: u32, vers: u32) -> String {
    match program_name(prog) {
        Some(p) => format!("{p}v{vers}"),
        None => format!("{prog}v{vers}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_the_usual_procedures() {
        assert_eq!(procedure_name(NFS_PROGRAM, 3, 1), Some("GETATTR"));
        assert_eq!(procedure_name(NFS_PROGRAM, 3, 21), Some("COMMIT"));
        assert_eq!(procedure_name(NFS_PROGRAM, 3, 22), None);
        assert_eq!(procedure_name(NFS_PROGRAM, 2, 8), Some("WRITE"));
        assert_eq!(procedure_name(NFS_PROGRAM, 4, 1), Some("COMPOUND"));
        assert_eq!(procedure_name(MOUNT_PROGRAM, 3, 1), Some("MNT"));
        assert_eq!(procedure_name(MOUNT_PROGRAM, 3, 6), None);
        assert_eq!(procedure_name(MOUNT_PROGRAM, 1, 6), Some("EXPORTALL"));
        assert_eq!(procedure_name(NLM_PROGRAM, 4, 2), Some("LOCK"));
        assert_eq!(procedure_name(NLM_PROGRAM, 4, 17), None);
        assert_eq!(procedure_name(NLM_PROGRAM, 4, 23), Some("FREE_ALL"));
        assert_eq!(procedure_name(NLM_PROGRAM, 1, 20), None);
        assert_eq!(procedure_name(RPCBIND_PROGRAM, 4, 3), Some("GETADDR"));
        assert_eq!(procedure_name(0x2000_5244, 1, 0), None);
        assert_eq!(procedure_name(NFS_PROGRAM, 3, u32::MAX), None);
    }

    #[test]
    fn numbers_of_names() {
        assert_eq!(procedure_number(NFS_PROGRAM, 3, "read"), Some(6));
        assert_eq!(procedure_number(NLM_PROGRAM, 4, ""), None);
        assert_eq!(procedure_number(NFS_PROGRAM, 3, "nope"), None);
        assert_eq!(program_version_label(NFS_PROGRAM, 3), "NFSv3");
        assert_eq!(program_version_label(7, 1), "7v1");
    }
}
