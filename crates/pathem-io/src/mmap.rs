//! A memory mapping that unmaps itself: the rings and buffers the kernel shares with a port
//! (an AF_XDP socket's rings and UMEM, a packet socket's ring).

use std::os::fd::RawFd;

/// A mapping made by `mmap(2)`, unmapped when dropped.
pub(crate) struct Mmap {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone; what the kernel shares through it is
// synchronised by the users' own protocol (status words, producer and consumer indexes).
unsafe impl Send for Mmap {}

impl Mmap {
    /// `len` bytes of what socket `fd` shares at `offset`, mapped shared and populated.
    pub(crate) fn socket(fd: RawFd, len: usize, offset: i64) -> std::io::Result<Mmap> {
        Self::map(len, libc::MAP_SHARED, fd, offset)
    }

    /// `len` bytes of zeroed private memory, populated.
    pub(crate) fn anonymous(len: usize) -> std::io::Result<Mmap> {
        Self::map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    }

    fn map(len: usize, flags: i32, fd: RawFd, offset: i64) -> std::io::Result<Mmap> {
        // SAFETY: a fresh mapping chosen by the kernel (no address given, so nothing else is
        // replaced), of the length asked; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_POPULATE,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(ptr as *mut u8).ok_or_else(std::io::Error::last_os_error)?;
        Ok(Mmap { ptr, len })
    }

    /// Where the mapping starts.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and are unmapped exactly once.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
    }
}
