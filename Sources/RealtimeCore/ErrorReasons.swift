#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

/// Plain reasons for the errors of the libraries underneath, for error descriptions: a socket
/// error as its system message, a TLS failure as what went wrong with the certificate or the
/// handshake, never a source path of the machine the library was built on.
package enum ErrorReasons {
    /// A plain reason for `error`, or nil when it has none here (its own description is used).
    package static func reason(_ error: any Error) -> String? {
        switch error {
        case let error as IOError:
            return systemMessage(error.errnoCode)
        case let error as NIOConnectionError:
            if let first = error.connectionErrors.first { return reason(first.error) }
            return error.dnsAError.flatMap(reason) ?? error.dnsAAAAError.flatMap(reason)
        case let error as ChannelError:
            if case .connectTimeout = error { return "the connection attempt timed out" }
            return nil
        default:
            return tlsReason(error)
        }
    }

    /// The system's message for `code` ("connection refused"), with the errno.
    static func systemMessage(_ code: Int32) -> String {
        let message = String(cString: strerror(code))
        return "\(message.prefix(1).lowercased() + message.dropFirst()) (errno \(code))"
    }

    /// What a TLS failure was, from the error's text (BoringSSL reports its reason only there).
    static func tlsReason(_ error: any Error) -> String? {
        if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
            return "certificate name mismatch: the server's certificate is not for this host name"
        }
        guard TLSErrorDetection.isTLSFailure(error) else { return nil }
        let text = String(describing: error)
        if text.contains("failedToValidateHostname") {
            return "certificate name mismatch: the server's certificate is not for this host name"
        }
        if text.contains("CERTIFICATE_EXPIRED") || text.contains("certificate has expired") {
            return "certificate expired"
        }
        if text.contains("CERTIFICATE_VERIFY_FAILED") {
            return "certificate not trusted: it does not chain to a trusted root (or it has expired or is not valid yet)"
        }
        if text.contains("WRONG_VERSION_NUMBER") || text.contains("PACKET_LENGTH_TOO_LONG") || text.contains("HTTP_REQUEST") {
            return "the server does not speak TLS on this port"
        }
        if text.contains("ALERT") || text.contains("alert") {
            return "the server sent a TLS alert (\(alertName(text) ?? "unnamed"))"
        }
        if TLSErrorDetection.isUncleanShutdown(error) {
            return "the TCP connection ended without a TLS close (close_notify): the server, a relay or the network went away"
        }
        if TLSErrorDetection.endsConnection(error) || text.contains("uncleanShutdown") || text.contains("EOF during") {
            return "the TCP connection ended during the TLS handshake"
        }
        return "the TLS handshake failed: \(withoutSourcePaths(text))"
    }

    /// The alert BoringSSL names (`SSLV3_ALERT_HANDSHAKE_FAILURE` -> "handshake failure").
    private static func alertName(_ text: String) -> String? {
        guard let range = text.range(of: "ALERT_") else { return nil }
        let name = text[range.upperBound...].prefix { $0.isLetter || $0 == "_" }
        return name.isEmpty ? nil : name.lowercased().replacingOccurrences(of: "_", with: " ")
    }

    /// `text` without the ` at /path/file.cc:123` locations BoringSSL adds to its errors.
    package static func withoutSourcePaths(_ text: String) -> String {
        guard text.contains(" at /") else { return text }
        var out = ""
        var rest = Substring(text)
        while let range = rest.range(of: " at /") {
            out += rest[..<range.lowerBound]
            rest = rest[range.upperBound...]
            // Skip the path and its :line.
            rest = rest.drop { !$0.isWhitespace && $0 != "]" && $0 != ")" && $0 != "," }
        }
        return out + rest
    }
}
