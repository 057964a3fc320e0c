#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The index of the first `byte` in `bytes` at or after `from`, or nil: found with `memchr`,
/// which compares many bytes at a time (a record separator, a line end).
package func firstIndex(of byte: UInt8, in bytes: UnsafeRawBufferPointer, from: Int) -> Int? {
    guard from < bytes.count, let base = bytes.baseAddress, let hit = memchr(base + from, Int32(byte), bytes.count - from) else {
        return nil
    }
    return UnsafeRawPointer(hit) - base
}

/// Whether `bytes` are UTF-8 as RFC 3629 defines it: no overlong forms, no encoded surrogates,
/// nothing past U+10FFFF, no sequence cut short. Eight ASCII bytes are checked at a time, as
/// protocol text mostly is.
package func isValidUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
    var index = 0
    let count = bytes.count
    while true {
        while index + 8 <= count, bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self) & 0x8080_8080_8080_8080 == 0 {
            index += 8
        }
        guard index < count else { return true }
        let byte = bytes[index]
        if byte < 0x80 {
            index += 1
            continue
        }
        let length: Int
        let minimum: UInt32
        var scalar: UInt32
        switch byte {
        case 0xC2...0xDF: length = 2; scalar = UInt32(byte & 0x1F); minimum = 0x80
        case 0xE0...0xEF: length = 3; scalar = UInt32(byte & 0x0F); minimum = 0x800
        case 0xF0...0xF4: length = 4; scalar = UInt32(byte & 0x07); minimum = 0x10000
        default: return false
        }
        guard index + length <= count else { return false }
        for offset in 1..<length {
            let next = bytes[index + offset]
            guard next & 0xC0 == 0x80 else { return false }
            scalar = scalar << 6 | UInt32(next & 0x3F)
        }
        if scalar < minimum || scalar > 0x10FFFF || (0xD800...0xDFFF).contains(scalar) { return false }
        index += length
    }
}
