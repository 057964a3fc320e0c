// A chat screen's socket holder, written the way socket.io-client-swift's README and example apps
// do it: one manager kept alive by a singleton, handlers capturing [weak self], UI updates hopped to
// the main queue, acks with timeouts. App types are stubbed.
import Foundation
import SocketIO

protocol ChatSocketDelegate: AnyObject {
    func chatDidReceive(message: String, from user: String)
    func chatConnectionChanged(isConnected: Bool)
}

final class UILabelStub { var text: String? }

@MainActor
final class ChatSocketManager {
    static let shared = ChatSocketManager()

    private let manager = SocketManager(socketURL: URL(string: "http://localhost:3000")!, config: [.log(false), .compress, .reconnectWait(2)])
    private var socket: SocketIOClient { manager.defaultSocket }
    weak var delegate: ChatSocketDelegate?
    private(set) var users: [String] = []

    func establishConnection(token: String) {
        socket.on(clientEvent: .connect) { [weak self] data, ack in
            print("socket connected", data)
            self?.delegate?.chatConnectionChanged(isConnected: true)
        }
        socket.on(clientEvent: .disconnect) { [weak self] data, ack in
            DispatchQueue.main.async {
                self?.delegate?.chatConnectionChanged(isConnected: false)
            }
        }
        socket.on("userList") { [weak self] data, ack in
            guard let list = data.first as? [[String: Any]] else { return }
            self?.users = list.compactMap { $0["nickname"] as? String }
        }
        socket.on("newChatMessage") { [weak self] data, ack in
            guard let user = data[0] as? String, let message = data[1] as? String else { return }
            self?.delegate?.chatDidReceive(message: message, from: user)
            if ack.expected { ack.with("received") }
        }
        socket.connect(withPayload: ["token": token])
    }

    func closeConnection() {
        socket.disconnect()
    }

    func send(message: String, withNickname nickname: String) {
        socket.emit("chatMessage", nickname, message)
    }

    func join(nickname: String, completion: @escaping ([String]) -> Void) {
        socket.emitWithAck("connectUser", nickname).timingOut(after: 5) { data in
            if let first = data.first as? String, first == SocketAckStatus.noAck {
                completion([])
                return
            }
            completion(data.compactMap { $0 as? String })
        }
    }

    func sendTyping(nickname: String) {
        socket.emit("startType", with: [nickname], completion: nil)
    }
}

final class ChatViewController: ChatSocketDelegate {
    let statusLabel = UILabelStub()

    func chatDidReceive(message: String, from user: String) {
        statusLabel.text = "\(user): \(message)"
    }

    func chatConnectionChanged(isConnected: Bool) {
        statusLabel.text = isConnected ? "online" : "offline"
    }
}
