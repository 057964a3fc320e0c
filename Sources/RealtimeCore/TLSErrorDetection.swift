import NIOCore
import NIOPosix
import NIOSSL

/// Recognises TLS failures inside the wrappers NIO and async-http-client put around them
/// (`NIOConnectionError` lists one failure per address tried).
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
}
