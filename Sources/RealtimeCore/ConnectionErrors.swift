#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore
import NIOSSL

extension SocketConnection {
    /// What a failure of one of our connections (a WebSocket's or an event stream's) is called when
    /// no protocol has a better name for it, by the stage it happened in: our own errors and
    /// cancellation as they are (given `stage` where they had none), a connect timeout as
    /// `timeout`, a closed, reset or lost connection as `connectionClosed` (with or without a TLS
    /// close_notify), a TLS handshake that failed for a reason another attempt does not change as
    /// `tlsFailure`, anything else while connecting as `connectFailed`.
    ///
    /// `established`: the connection was open (the transport knows: a WebSocket after its upgrade,
    /// an event stream after its response head). Any failure then is a lost connection, whatever
    /// its cause (a TLS alert, an EOF, a reset), never a handshake failure.
    static func mapError(_ error: any Error, url: String, established: Bool = false) -> any Error {
        if let ended = connectionEnd(error, url: url, established: established) { return ended }
        switch error {
        case let error as RealtimeError:
            if established, error.explicitStage == nil, error.code == .connectionClosed { return error.at(.established) }
            return error
        case is CancellationError:
            return error
        case let error as ChannelError:
            switch error {
            case .connectTimeout:
                return RealtimeError(.timeout, "could not connect to \(Redaction.url(url)) in time", stage: .connect, underlying: error)
            case .inappropriateOperationForState, .eof, .ioOnClosedChannel, .alreadyClosed, .outputClosed, .inputClosed:
                return RealtimeError(
                    .connectionClosed, "the server closed the connection to \(Redaction.url(url))",
                    stage: established ? .established : nil, underlying: error)
            default:
                if established { return lost(error, url: url) }
                return RealtimeError(.connectFailed, "could not connect to \(Redaction.url(url))", stage: .connect, underlying: error)
            }
        case let error where TLSErrorDetection.isTLSFailure(error):
            if established { return lost(error, url: url) }
            return RealtimeError(.tlsFailure, "TLS handshake with \(Redaction.url(url)) failed", stage: .tls, underlying: error)
        default:
            if established { return lost(error, url: url) }
            return RealtimeError(.connectFailed, "could not connect to \(Redaction.url(url))", stage: .connect, underlying: error)
        }
    }

    /// A connection that ended under its user, whatever the transport (ours, or async-http-client's
    /// for requests): an end of the TCP connection without a TLS close_notify (NIOSSL reports it
    /// only once the handshake is done) or during the handshake, a reset or a broken pipe; nil for
    /// any other error. The network, a relay or the server went away: another attempt may well
    /// succeed. `established`: the transport knows the connection was open.
    package static func connectionEnd(_ error: any Error, url: String, established: Bool) -> RealtimeError? {
        if TLSErrorDetection.isUncleanShutdown(error) {
            return RealtimeError(
                .connectionClosed, "the connection to \(Redaction.url(url)) was lost without a TLS close", stage: .established, underlying: error)
        }
        if TLSErrorDetection.endsConnection(error) {
            return RealtimeError(
                .connectionClosed, "the connection to \(Redaction.url(url)) ended during the TLS handshake",
                stage: established ? .established : .tls, underlying: error)
        }
        guard let error = error as? IOError else { return nil }
        let code = error.errnoCode
        // The peer (or a proxy, or the network) reset a connection that was made: it was lost,
        // which is not the same as never having connected. Unreachable and timed out only count
        // where the connection was open (while connecting they are a failed connect).
        if [ECONNRESET, EPIPE, ECONNABORTED].contains(code) || (established && [ETIMEDOUT, EHOSTUNREACH, ENETUNREACH].contains(code)) {
            return RealtimeError(
                .connectionClosed, "the connection to \(Redaction.url(url)) was \(code == ETIMEDOUT ? "lost (timed out)" : "reset")",
                stage: established ? .established : nil, underlying: error)
        }
        return nil
    }

    /// An open connection that failed: lost, with its cause.
    private static func lost(_ error: any Error, url: String) -> RealtimeError {
        RealtimeError(.connectionClosed, "the connection to \(Redaction.url(url)) was lost", stage: .established, underlying: error)
    }
}
