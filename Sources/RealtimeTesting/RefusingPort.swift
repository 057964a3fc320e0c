#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import NIOConcurrencyHelpers

/// A TCP port on 127.0.0.1 that refuses every connection for as long as this value holds it: a
/// socket bound to it without listening. Unlike a stopped server's port, no other server (a
/// parallel test's, on an ephemeral port) can take it meanwhile, so a connect is refused for
/// certain.
public final class RefusingPort: Sendable {
    /// The port, on 127.0.0.1.
    public let port: Int
    private let descriptor: NIOLockedValueBox<Int32?>

    /// Holds a free ephemeral port.
    public convenience init() throws {
        guard let held = Self.bind(port: 0) else { throw LoopbackServerError(message: "could not bind a port on 127.0.0.1") }
        self.init(descriptor: held.descriptor, port: held.port)
    }

    /// Holds `port`, or returns nil when it cannot be bound (someone else has it).
    public convenience init?(port: Int) {
        guard let held = Self.bind(port: port) else { return nil }
        self.init(descriptor: held.descriptor, port: held.port)
    }

    private init(descriptor: Int32, port: Int) {
        self.descriptor = NIOLockedValueBox(descriptor)
        self.port = port
    }

    /// Lets the port go (also when this value is released).
    public func release() {
        if let descriptor = descriptor.withLockedValue({ value -> Int32? in
            defer { value = nil }
            return value
        }) {
            _ = systemClose(descriptor)
        }
    }

    deinit { release() }

    private static func bind(port: Int) -> (descriptor: Int32, port: Int)? {
        #if canImport(Glibc)
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { return nil }
        var one: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                systemBind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
            }
        }
        guard bound else {
            _ = systemClose(descriptor)
            return nil
        }
        return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
    }
}

#if canImport(Glibc)
private let systemBind = Glibc.bind
private let systemClose = Glibc.close
#elseif canImport(Musl)
private let systemBind = Musl.bind
private let systemClose = Musl.close
#elseif canImport(Darwin)
private let systemBind = Darwin.bind
private let systemClose = Darwin.close
#endif
