import NIOCore
import NIOPosix
import NIOSSL

/// Recognises TLS failures inside the wrappers NIO and async-http-client put around them
/// (`NIOConnectionError` lists one failure per address tried), and tells a handshake that was
/// refused from a connection that merely ended.
enum TLSErrorDetection {
    static func isTLSFailure(_ error: any Error) -> Bool {
        switch error {
        case is NIOSSLError, is BoringSSLError, is NIOSSLExtraError:
            return true
        case let error as NIOConnectionError:
            return error.connectionErrors.contains { isTLSFailure($0.error) } || (error.dnsAError.map(isTLSFailure) ?? false)
        default:
            // async-http-client reports some handshake failures only through its description.
            let text = String(describing: error)
            return text.contains("NIOSSL") || text.contains("BoringSSL") || text.contains("handshakeFailed")
        }
    }

    /// NIOSSL's "unclean shutdown": the TCP connection ended without a close_notify after the
    /// handshake had completed (during a handshake NIOSSL reports `handshakeFailed` instead).
    static func isUncleanShutdown(_ error: any Error) -> Bool {
        if let error = error as? NIOSSLError, case .uncleanShutdown = error { return true }
        return false
    }

    /// The TCP connection ended under TLS, after the handshake or during it (an EOF, not an alert
    /// or a certificate): the network or the peer went away, which another attempt may not meet.
    static func endsConnection(_ error: any Error) -> Bool {
        switch error {
        case let error as NIOSSLError:
            switch error {
            case .uncleanShutdown:
                return true
            case .handshakeFailed(let inner):
                return isEOFDuringHandshake(inner)
            default:
                return false
            }
        case let error as BoringSSLError:
            return isEOFDuringHandshake(error)
        case let error as NIOConnectionError:
            return !error.connectionErrors.isEmpty && error.connectionErrors.allSatisfy { endsConnection($0.error) }
        default:
            return false
        }
    }

    private static func isEOFDuringHandshake(_ error: BoringSSLError) -> Bool {
        switch error {
        case .zeroReturn, .syscallError:
            return true
        case .sslError(let stack):
            return stack.contains(.eofDuringHandshake) || stack.contains(.eofDuringAdditionalCertficiateChainValidation)
        default:
            return false
        }
    }
}
