//! FSSTAT, FSINFO, PATHCONF.

use rustix::fs::fstatvfs;

use super::attr::{Attr, Time};
use super::error::NfsResult;
use super::export::{Export, MAX_IO};
use super::handle::FileHandle;
use super::resolve::NAME_MAX;

/// The result of FSSTAT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStat {
    /// The object's attributes.
    pub attr: Attr,
    /// Total size in octets.
    pub tbytes: u64,
    /// Free octets.
    pub fbytes: u64,
    /// Octets free to the server process (not reserved for root).
    pub abytes: u64,
    /// Total file slots.
    pub tfiles: u64,
    /// Free file slots.
    pub ffiles: u64,
    /// File slots free to the server process.
    pub afiles: u64,
    /// Seconds the figures are expected not to change (0: volatile).
    pub invarsec: u32,
}

/// FSINFO `properties` bit: hard links supported.
pub const FSF_LINK: u32 = 0x1;
/// FSINFO `properties` bit: symlinks supported.
pub const FSF_SYMLINK: u32 = 0x2;
/// FSINFO `properties` bit: PATHCONF is the same for every object.
pub const FSF_HOMOGENEOUS: u32 = 0x8;
/// FSINFO `properties` bit: SETATTR can set times to the client's.
pub const FSF_CANSETTIME: u32 = 0x10;

/// The result of FSINFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsInfo {
    /// The object's attributes.
    pub attr: Attr,
    /// Largest READ: [`MAX_IO`].
    pub rtmax: u32,
    /// Preferred READ size.
    pub rtpref: u32,
    /// Suggested READ multiple.
    pub rtmult: u32,
    /// Largest WRITE: [`MAX_IO`].
    pub wtmax: u32,
    /// Preferred WRITE size.
    pub wtpref: u32,
    /// Suggested WRITE multiple.
    pub wtmult: u32,
    /// Preferred READDIR size in octets.
    pub dtpref: u32,
    /// Largest file size.
    pub maxfilesize: u64,
    /// Time granularity the server keeps.
    pub time_delta: Time,
    /// `FSF_*` bits.
    pub properties: u32,
}

/// The result of PATHCONF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathConf {
    /// The object's attributes.
    pub attr: Attr,
    /// Most hard links to an object.
    pub linkmax: u32,
    /// Longest name.
    pub name_max: u32,
    /// Longer names are refused (not truncated).
    pub no_trunc: bool,
    /// Only a privileged user may change an owner.
    pub chown_restricted: bool,
    /// Names are compared without case.
    pub case_insensitive: bool,
    /// Names keep their case.
    pub case_preserving: bool,
}

impl Export {
    /// FSSTAT of the file system holding the object.
    pub fn fsstat(&self, fh: &FileHandle) -> NfsResult<FsStat> {
        let obj = self.obj(fh)?;
        let s = fstatvfs(&*obj.fd)?;
        let unit = s.f_frsize;
        Ok(FsStat {
            attr: obj.attr,
            tbytes: s.f_blocks.saturating_mul(unit),
            fbytes: s.f_bfree.saturating_mul(unit),
            abytes: s.f_bavail.saturating_mul(unit),
            tfiles: s.f_files,
            ffiles: s.f_ffree,
            afiles: s.f_favail,
            invarsec: 0,
        })
    }

    /// FSINFO: 1 MiB reads and writes, nanosecond times.
    pub fn fsinfo(&self, fh: &FileHandle) -> NfsResult<FsInfo> {
        let obj = self.obj(fh)?;
        Ok(FsInfo {
            attr: obj.attr,
            rtmax: MAX_IO,
            rtpref: MAX_IO,
            rtmult: 4096,
            wtmax: MAX_IO,
            wtpref: MAX_IO,
            wtmult: 4096,
            dtpref: 64 * 1024,
            maxfilesize: i64::MAX as u64,
            time_delta: Time {
                seconds: 0,
                nanos: 1,
            },
            properties: FSF_LINK | FSF_SYMLINK | FSF_HOMOGENEOUS | FSF_CANSETTIME,
        })
    }

    /// PATHCONF. `linkmax` is knfsd's default (255); `name_max` the host
    /// file system's, at most [`NAME_MAX`].
    pub fn pathconf(&self, fh: &FileHandle) -> NfsResult<PathConf> {
        let obj = self.obj(fh)?;
        let s = fstatvfs(&*obj.fd)?;
        Ok(PathConf {
            attr: obj.attr,
            linkmax: 255,
            name_max: s.f_namemax.min(NAME_MAX as u64) as u32,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
        })
    }
}
