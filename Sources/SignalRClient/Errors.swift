public import Foundation

/// The errors this module reports: SwiftSignalRClient's cases and the official client's, in one
/// enum. `invalidOperation` and `handshakeError` are in both libraries: the case is
/// SwiftSignalRClient's (label `message:`), and the official client's unlabeled spelling makes the
/// same case; a pattern `case .invalidOperation(let text)` matches it either way.
public enum SignalRError: Error, CustomStringConvertible {
    // SwiftSignalRClient
    case invalidState
    case webError(statusCode: Int)
    case hubInvocationError(message: String)
    case hubInvocationCancelled
    case unknownMessageType
    case invalidMessage
    case unsupportedType
    case serializationError(underlyingError: any Error)
    case connectionIsBeingClosed
    case invalidOperation(message: String)
    case protocolViolation(underlyingError: any Error)
    case handshakeError(message: String)
    case invalidNegotiationResponse(message: String)
    case serverClose(message: String?)
    case noSupportedTransportAvailable
    case connectionIsReconnecting
    // The official client
    case incompleteMessage
    case invalidDataType
    case failedToEncodeHandshakeRequest
    case failedToDecodeResponseData
    case expectedHandshakeResponse
    case noHandshakeMessageReceived
    case unsupportedHandshakeVersion
    case connectionAborted
    case negotiationError(String)
    case failedToStartConnection(String)
    case unexpectedResponseCode(Int)
    case invalidTextMessageEncoding
    case httpTimeoutError
    case invalidResponseType
    case cannotSentUntilTransportConnected
    case invalidData(String)
    case eventSourceFailedToConnect
    case eventSourceInvalidTransferFormat
    case invalidUrl(String)
    case invocationError(String)
    case unsupportedTransport(String)
    case messageBiggerThan2GB
    case unexpectedMessageType(String)
    case streamCancelled
    case serverTimeout(TimeInterval)

    /// A sentence describing the error.
    public var description: String {
        switch self {
        case .invalidState: "Invalid state."
        case .webError(let statusCode): "HTTP error, status code \(statusCode)."
        case .hubInvocationError(let message): "Hub invocation error: \(message)"
        case .hubInvocationCancelled: "The invocation was cancelled: the connection closed."
        case .unknownMessageType: "Unknown message type."
        case .invalidMessage: "Invalid message."
        case .unsupportedType: "Unsupported type."
        case .serializationError(let error): "Serialization error: \(error)"
        case .connectionIsBeingClosed: "The connection is being closed."
        case .invalidOperation(message: let message): "Invalid operation: \(message)"
        case .protocolViolation(let error): "Protocol violation: \(error)"
        case .handshakeError(message: let message): "Handshake error: \(message)"
        case .invalidNegotiationResponse(let message): "Invalid negotiation response: \(message)"
        case .serverClose(let message): "The server closed the connection\(message.map { ": \($0)" } ?? ".")"
        case .noSupportedTransportAvailable: "No supported transport is available."
        case .connectionIsReconnecting: "The connection is reconnecting."
        case .incompleteMessage: "Message is incomplete."
        case .invalidDataType: "Invalid data type."
        case .failedToEncodeHandshakeRequest: "Failed to encode handshake request to JSON string."
        case .failedToDecodeResponseData: "Failed to decode response data."
        case .expectedHandshakeResponse: "Expected a handshake response from the server."
        case .noHandshakeMessageReceived: "No handshake message received."
        case .unsupportedHandshakeVersion: "Unsupported handshake version."
        case .connectionAborted: "Connection aborted."
        case .negotiationError(let message): "Negotiation error: \(message)"
        case .failedToStartConnection(let message): "Failed to start connection: \(message)"
        case .unexpectedResponseCode(let code): "Unexpected response code: \(code)"
        case .invalidTextMessageEncoding: "Invalid text message encoding."
        case .httpTimeoutError: "HTTP timeout."
        case .invalidResponseType: "Invalid response type."
        case .cannotSentUntilTransportConnected: "Cannot send until the transport is connected."
        case .invalidData(let message): "Invalid data: \(message)"
        case .eventSourceFailedToConnect: "EventSource failed to connect."
        case .eventSourceInvalidTransferFormat: "Server-Sent Events carry only text."
        case .invalidUrl(let url): "Invalid URL: \(url)"
        case .invocationError(let message): "Invocation error: \(message)"
        case .unsupportedTransport(let message): "The transport is not supported: \(message)"
        case .messageBiggerThan2GB: "The message is bigger than 2 GB."
        case .unexpectedMessageType(let type): "Unexpected message type: \(type)."
        case .streamCancelled: "The stream was cancelled."
        case .serverTimeout(let seconds): "The server sent nothing for \(seconds) s."
        }
    }
}

extension SignalRError {
    /// The official client's spelling of ``invalidOperation(message:)``.
    public static func invalidOperation(_ message: String) -> SignalRError { .invalidOperation(message: message) }
    /// The official client's spelling of ``handshakeError(message:)``.
    public static func handshakeError(_ message: String) -> SignalRError { .handshakeError(message: message) }
}

extension SignalRError: Equatable {
    /// Same case and same values (errors inside compare by their description).
    public static func == (lhs: SignalRError, rhs: SignalRError) -> Bool {
        lhs.description == rhs.description
    }
}
