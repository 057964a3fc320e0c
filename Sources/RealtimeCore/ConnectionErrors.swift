#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore

extension SocketConnection {
    /// What a failure of one of our connections (a WebSocket's or an event stream's) is called when
    /// no protocol has a better name for it: our own errors and cancellation as they are, a connect
    /// timeout as `timeout`, a closed or reset connection as `connectionClosed`, a TLS failure as
    /// `tlsFailure`, anything else as `connectFailed`.
    static func mapError(_ error: any Error, url: String) -> any Error {
        switch error {
        case let error as RealtimeError:
            return error
        case is CancellationError:
            return error
        case let error as ChannelError:
            switch error {
            case .connectTimeout:
                return RealtimeError(.timeout, "could not connect to \(Redaction.url(url)) in time", underlying: error)
            case .inappropriateOperationForState, .eof, .ioOnClosedChannel, .alreadyClosed, .outputClosed, .inputClosed:
                return RealtimeError(.connectionClosed, "the server closed the connection to \(Redaction.url(url))", underlying: error)
            default:
                return RealtimeError(.connectFailed, "could not connect to \(Redaction.url(url))", underlying: error)
            }
        case let error where TLSErrorDetection.isTLSFailure(error):
            return RealtimeError(.tlsFailure, "TLS handshake with \(Redaction.url(url)) failed", underlying: error)
        case let error as IOError where [ECONNRESET, EPIPE, ECONNABORTED].contains(error.errnoCode):
            // The peer (or a proxy, or the network) reset a connection that was made: it was lost,
            // which is not the same as never having connected.
            return RealtimeError(.connectionClosed, "the connection to \(Redaction.url(url)) was reset", underlying: error)
        default:
            return RealtimeError(.connectFailed, "could not connect to \(Redaction.url(url))", underlying: error)
        }
    }
}
