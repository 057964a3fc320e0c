import NIOConcurrencyHelpers
import NIOCore
public import NIOSSL

/// Counts the TLS handshakes a test server completes, through the server's key log callback (one
/// client random per handshake, TLS 1.2 and 1.3 alike).
///
/// ```swift
/// let counter = TLSHandshakeCounter()
/// var tls = TLSConfiguration.makeServerConfiguration(...)
/// counter.install(on: &tls)
/// ```
public final class TLSHandshakeCounter: Sendable {
    private let clientRandoms = NIOLockedValueBox<Set<String>>([])

    /// Makes a value with every default.
    public init() {}

    /// Makes `configuration` report its handshakes to this counter.
    public func install(on configuration: inout TLSConfiguration) {
        configuration.keyLogCallback = { [clientRandoms] line in
            // "<LABEL> <client random hex> <secret hex>\n"
            let fields = String(buffer: line).split(separator: " ")
            guard fields.count >= 2 else { return }
            clientRandoms.withLockedValue { _ = $0.insert(String(fields[1])) }
        }
    }

    /// Handshakes seen so far (completed or at least past the key exchange).
    public var count: Int { clientRandoms.withLockedValue { $0.count } }
}
